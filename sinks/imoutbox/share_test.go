package imoutbox_test

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/testenv"
	"github.com/hyapp/roomflow/sinks/tencentim/imfake"
)

// Two publish-im replicas share im.max_calls_per_second, roomflow's share
// of the app limit, by the partitions their fast paths own: busy together,
// on both paths, they never make the fake IM (whose app limit is set to the
// share: any call beyond it is refused with 60007) refuse a call for the
// app limit or drop a message for the 40/s group limit, and each room is
// sent by one replica only, the compensation scan's rows included.
func TestReplicasShareTheIMBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 10-second run at the paced rate")
	}
	e := newEnv(t, true) // 4 partitions: 2 per replica
	const share = 100
	e.fake = imfake.New(imfake.Config{SDKAppID: testApp, AdminIdentifier: testAdmin, SecretKey: testKey, AppCallsPerSecond: share})
	srv := httptest.NewServer(e.fake)
	t.Cleanup(srv.Close)
	e.cfg.IM.Endpoint = srv.URL
	e.cfg.IM.MaxCallsPerSecond = share
	e.cfg.PublishTimeout = 4 * time.Second
	e.cfg.LockTTL = 6 * time.Second

	pa, regA := e.newPublisher(fastAndScan)
	pb, regB := e.newPublisher(fastAndScan)
	stopA := e.run(pa)
	stopB := e.run(pb)
	budget := func() (float64, float64) {
		return metric(t, regA, "roomflow_im_call_budget_per_second", nil), metric(t, regB, "roomflow_im_call_budget_per_second", nil)
	}
	testenv.Eventually(t, 20*time.Second, "each replica's budget half the share", func() bool {
		a, b := budget()
		return a == share/2 && b == share/2
	})

	// 1000 events, half of them on 4 hot rooms that alone could take more
	// than 40/s; every room has events of both kinds: a third only in
	// room_outbox, old enough for the scan at once (the relay never sent
	// them), the rest also on Kafka for the fast path.
	const n = 1000
	var scanEvs, fastEvs []event
	for i := 0; i < n; i++ {
		room := fmt.Sprintf("hot%d", (i/2)%4)
		if i%2 == 1 {
			room = fmt.Sprintf("r%02d", (i/2)%50)
		}
		ev := gift(fmt.Sprintf("share-%04d", i), room, int64(i+1))
		if i%3 == 0 {
			scanEvs = append(scanEvs, ev)
		} else {
			fastEvs = append(fastEvs, ev)
		}
	}
	start := time.Now()
	e.insert(10*time.Second, scanEvs...)
	e.produce(e.insert(0, fastEvs...), fastEvs)
	testenv.Eventually(t, 45*time.Second, "every event delivered", func() bool { return e.countStatus("delivered") == n })
	elapsed := time.Since(start)
	stopA()
	stopB()

	st := e.fake.Stats()
	t.Logf("%d events in %s; fake IM %+v", n, elapsed.Round(time.Millisecond), st)
	if st.Rejected != 0 || st.Dropped != 0 {
		t.Fatalf("%d calls refused (60007: over the share of the app limit), %d dropped (MsgFreqCtrl: over 40/s in a group)", st.Rejected, st.Dropped)
	}
	if st.MaxAppPerSecond > share || st.MaxGroupPerSecond > 40 {
		t.Fatalf("at most %d calls in a second (share %d), %d to one group (limit 40)", st.MaxAppPerSecond, share, st.MaxGroupPerSecond)
	}
	acc := e.fake.AcceptedByEvent()
	if len(acc) != n || st.Accepted != n {
		t.Fatalf("%d distinct events accepted, %d messages, want %d once each", len(acc), st.Accepted, n)
	}
	// Both busy: each replica delivered a good part, on the scan too.
	for name, reg := range map[string]*prometheus.Registry{"A": regA, "B": regB} {
		scan := metric(t, reg, "roomflow_im_outbox_events_total", map[string]string{"source": "scan", "outcome": "delivered"})
		fast := metric(t, reg, "roomflow_im_outbox_events_total", map[string]string{"source": "fast", "outcome": "delivered"})
		if scan < n/20 || fast < n/20 {
			t.Fatalf("replica %s delivered %v by the scan and %v by the fast path: not both busy", name, scan, fast)
		}
	}
	// One sender per room: the scan only claims the rooms its replica's
	// fast path owns.
	rows, err := e.db.Query(`SELECT room_id, COUNT(DISTINCT worker_id) FROM room_outbox GROUP BY room_id HAVING COUNT(DISTINCT worker_id) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var room string
		var workers int
		if err := rows.Scan(&room, &workers); err != nil {
			t.Fatal(err)
		}
		t.Errorf("room %s sent by %d replicas", room, workers)
	}
	if workers := []string{pa.Service.WorkerID(), pb.Service.WorkerID()}; workers[0] == workers[1] {
		t.Fatalf("replicas share a worker id %s", workers[0])
	}
}
