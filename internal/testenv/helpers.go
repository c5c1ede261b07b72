package testenv

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hyapp/roomflow/internal/kafkax"
)

// Eventually calls cond every 20ms until it returns true. If timeout
// passes first, it fails the test with "timed out waiting for <what>".
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Metric gathers g and returns the sum over the series of metric family
// name whose labels include every name/value pair of labels ("result",
// "committed", ...): a counter's or gauge's value, a histogram's or
// summary's sample count. ok is false when no series matches, so a test
// can tell a metric that was never registered from one at zero.
func Metric(g prometheus.Gatherer, name string, labels ...string) (v float64, ok bool) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
						break
					}
				}
				if !found {
					continue series
				}
			}
			ok = true
			v += value(m)
		}
	}
	return v, ok
}

// Total returns the sum over every series c collects, valued as in Metric:
// for a metric a test holds directly (a Counter, a CounterVec, a
// HistogramVec) rather than through a registry.
func Total(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var v float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil {
			v += value(&d)
		}
	}
	return v
}

// value is a counter's, gauge's or untyped metric's value, or a histogram's
// or summary's sample count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// ChildCommand returns a command that re-executes the running test binary,
// so a test can SIGKILL, SIGSTOP or SIGTERM real processes. run is the
// -test.run pattern of the child ("^$" runs no test: for a TestMain that
// dispatches on an environment variable); env is added to the parent's
// environment.
func ChildCommand(run string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers: a
// log sink or a child's output that a test inspects while it is written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// DrainCommitted reads every committed record of topics from the start to
// the end, read_committed, in per-partition offset order (control records
// left out). It reads each partition up to the high watermark it finds at
// the start, counting commit and abort markers, so it knows it is done
// even when the last transaction was aborted. Call it only when no
// transaction is open on topics (the producers stopped): an open
// transaction holds read_committed back, and DrainCommitted fails the test
// after 60s.
func (k *Kafka) DrainCommitted(t testing.TB, topics ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(k.Client(t)).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatalf("testenv: list end offsets: %v", err)
	}
	from := map[string]map[int32]kgo.Offset{}
	last := kafkax.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("testenv: end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if o.Offset == 0 {
			return
		}
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
			last[o.Topic] = map[int32]int64{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		last[o.Topic][o.Partition] = o.Offset
	})
	if len(from) == 0 {
		return nil
	}
	cl := k.Client(t, kgo.ConsumePartitions(from), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	var out []*kgo.Record
	err = kafkax.ReadToEnd(ctx, cl, nil, last, 0, kafkax.DataRecords(func(r *kgo.Record) (bool, error) {
		out = append(out, r)
		return false, nil
	}))
	if ctx.Err() != nil {
		t.Fatalf("testenv: drain timed out with %d records read: %v", len(out), err)
	}
	if err != nil {
		t.Fatalf("testenv: drain: %v", err)
	}
	return out
}

// ClosedAddr returns a loopback host:port that nothing listens on (a port
// just bound and released): clients pointed at it fail to connect.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// CheckLogComponent fails the test unless every line of jsonLogs (slog
// JSON output) carries exactly one "component" field, equal to component:
// a logger tagged twice (a component's logger handed to a library that
// tags it again) writes the key twice, which JSON readers resolve to
// either value.
func CheckLogComponent(t testing.TB, jsonLogs, component string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(jsonLogs), "\n") {
		if n := strings.Count(l, `"component":`); n != 1 || !strings.Contains(l, `"component":"`+component+`"`) {
			t.Errorf("log line has %d component fields, want one %q: %s", n, component, l)
		}
	}
}

// RunUntil runs run (a component's Run) in the background until cond
// holds, polled as by Eventually (failing after timeout with what), then
// cancels its context and waits up to 30s for it to return. It fails the
// test when run returns an error or does not stop.
func RunUntil(t testing.TB, run func(context.Context) error, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	Eventually(t, timeout, what, cond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancel")
	}
}

// HoldJoinGroups makes kfake leave every JoinGroup of group unanswered
// until the test ends (a rebalance waiting for a member that is gone), and
// returns a channel closed at the first one held. It needs kfake (k.Fake).
func (k *Kafka) HoldJoinGroups(t testing.TB, group string) <-chan struct{} {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) }) // before kfake closes
	var once sync.Once
	k.Fake.ControlKey(kmsg.JoinGroup.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Fake.KeepControl()
		if kreq.(*kmsg.JoinGroupRequest).Group != group {
			return nil, nil, false
		}
		once.Do(func() { close(held) })
		k.Fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return held
}
