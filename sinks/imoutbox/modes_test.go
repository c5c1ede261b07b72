package imoutbox_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// outbox_worker.enabled=false means publish-im delivers nothing: neither
// the fast path nor the compensation scan claims a row (so no retryable
// row is left behind a path that keeps sending), it says so at start with
// a WARN and roomflow_im_delivery_enabled 0, the backlog gauges still
// report, and it needs no IM credentials.
func TestDisabledDeliversNothing(t *testing.T) {
	e := newEnv(t, true)
	evs := []event{gift("d-1", "r1", 1), gift("d-2", "r1", 2)}
	raws := e.insert(time.Second, evs...)
	if _, err := e.db.Exec(`UPDATE room_outbox SET status = 'retryable', retry_count = 1 WHERE event_id = 'd-2'`); err != nil {
		t.Fatal(err)
	}
	e.produce(raws, evs)
	e.cfg.IM.SecretKey = "" // not needed when nothing is delivered
	reg, stop := e.publisher(disabled)
	testenv.Eventually(t, 10*time.Second, "backlog gauges", func() bool {
		return metric(t, reg, "roomflow_im_outbox_pending", map[string]string{"status": "retryable"}) == 1
	})
	time.Sleep(1500 * time.Millisecond) // several poll intervals, time to consume the topic
	stop()
	if r := e.row("d-1"); r.Status != "pending" || r.WorkerID != "" {
		t.Fatalf("d-1: %+v", r)
	}
	if r := e.row("d-2"); r.Status != "retryable" || r.RetryCount != 1 {
		t.Fatalf("d-2: %+v", r)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("%d IM calls with outbox_worker.enabled=false", n)
	}
	var warned bool
	for _, l := range strings.Split(e.logs.String(), "\n") {
		warned = warned || (strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "outbox_worker.enabled is false"))
	}
	if !warned {
		t.Fatalf("no WARN at start:\n%s", e.logs.String())
	}
	if v, ok := testenv.Metric(reg, "roomflow_im_delivery_enabled"); !ok || v != 0 {
		t.Fatalf("roomflow_im_delivery_enabled = %v (registered %v), want 0", v, ok)
	}
}

// An IM outage does not flood the log: n failed publishes over a few
// codes give one WARN per code (again only after an interval without
// failures) plus one summary per interval (counts per code), so
// O(codes x intervals) lines; every failure is a DEBUG line with IM-10's
// fields, and the metrics carry the counts.
func TestOutageLogsFirstPerCodeThenSummaries(t *testing.T) {
	e := newEnv(t, true)
	// Only the injected faults fail: a send slowed past the tests' 500ms
	// publish_timeout by a loaded machine would add a third code.
	e.cfg.PublishTimeout = 5 * time.Second
	e.cfg.LockTTL = 6 * time.Second
	const n = 60 // under the 200 calls/s pacing: failures keep coming every poll_interval
	var evs []event
	for i := 0; i < n; i++ {
		evs = append(evs, gift(fmt.Sprintf("out-%03d", i), fmt.Sprintf("r%02d", i%30), int64(i/30+1)))
	}
	raws := e.insert(0, evs...)
	e.fake.Inject(imfake.Fault{GroupID: "room-r00", HTTPStatus: 502}) // a gateway error for one room
	e.fake.Inject(imfake.Fault{Code: 10002})                          // an internal error for the rest
	const interval = 1500 * time.Millisecond
	e.cfg.FailureSummaryInterval = interval
	p, reg := e.newPublisher(fastAndScan)
	start := time.Now()
	stop := e.run(p)
	e.produce(raws, evs)
	testenv.Eventually(t, 30*time.Second, "several failed rounds", func() bool {
		return metric(t, reg, "roomflow_im_outbox_retries_total", nil) >= 10*n
	})
	stop()
	elapsed := time.Since(start)
	failures := metric(t, reg, "roomflow_im_outbox_retries_total", nil)

	var warns, debugs, summarized int
	firsts := map[string]int{}
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if l == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		msg, _ := rec["msg"].(string)
		switch {
		case rec["level"] == "WARN" && strings.HasPrefix(msg, "im publish failed"):
			warns++
			firsts[rec["code"].(string)]++
		case rec["level"] == "WARN" && msg == "im publish failures since the last summary":
			warns++
			summarized += int(rec["failures"].(float64))
			if _, ok := rec["by_code"].(map[string]any); !ok {
				t.Fatalf("summary without counts per code: %s", l)
			}
		case rec["level"] == "WARN":
			t.Errorf("unexpected WARN: %s", l)
		case rec["level"] == "DEBUG" && msg == "im publish failed":
			debugs++
			for _, k := range []string{"worker", "node_id", "event_id", "event_type", "room_id", "retry_count", "status", "code", "error", "source"} {
				if _, ok := rec[k]; !ok {
					t.Fatalf("debug line without %s: %s", k, l)
				}
			}
		}
	}
	if firsts["http"] < 1 || firsts["10002"] < 1 || len(firsts) != 2 {
		t.Fatalf("first-failure WARNs per code: %v, want http and 10002", firsts)
	}
	intervals := int(elapsed/interval) + 1
	if limit := (len(firsts) + 1) * intervals; warns > limit {
		t.Fatalf("%d WARN lines for %v failures in %s, want at most %d", warns, failures, elapsed, limit)
	}
	t.Logf("%v failed publishes in %s: %d WARN lines (first per code %v, rest summaries), %d DEBUG lines", failures, elapsed.Round(time.Millisecond), warns, firsts, debugs)
	if float64(debugs+len(firsts)) != failures || float64(summarized) != failures {
		t.Fatalf("%v failures: %d debug + %d first lines, %d in summaries", failures, debugs, len(firsts), summarized)
	}
}

// The last failure summary at shutdown counts the failures of sends that
// were still in flight at cancel: it is written after every send ended, so
// the summaries always add up to roomflow_im_outbox_retries_total.
func TestLastSummaryCountsSendsInFlightAtStop(t *testing.T) {
	e := newEnv(t, true) // the scan sends the rooms of the partitions the fast path owns
	e.cfg.PublishTimeout = 5 * time.Second
	e.cfg.LockTTL = 6 * time.Second
	arrived := make(chan struct{}, 1) // the send reached IM: stop finds it in flight
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		e.fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e.cfg.IM.Endpoint = srv.URL
	e.insert(time.Second, gift("slow-fail", "r1", 1))
	e.fake.Inject(imfake.Fault{EventID: "slow-fail", Delay: 2 * time.Second, Code: 10002, Times: 1})
	e.cfg.FailureSummaryInterval = time.Hour // only the summary at shutdown
	p, reg := e.newPublisher(fastAndScan)
	stop := e.run(p)
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the send never reached IM")
	}
	stop()
	if r := e.row("slow-fail"); r.Status != "retryable" || r.RetryCount != 1 {
		t.Fatalf("send in flight at stop: %+v, want its failure recorded", r)
	}
	summarized := 0
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if rec["msg"] == "im publish failures since the last summary" {
			summarized += int(rec["failures"].(float64))
		}
	}
	if failures := metric(t, reg, "roomflow_im_outbox_retries_total", nil); failures != 1 || summarized != 1 {
		t.Fatalf("%v failures, %d in summaries; want 1 and 1", failures, summarized)
	}
}
