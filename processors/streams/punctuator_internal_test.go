package streams

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// A task's punctuations are scheduled one interval after it starts; at the
// tick of an LSO read a due task opens a round at its partition's LSO, one
// whose LSO is missing waits (lso_unavailable) and the next read waits
// lsoRetry, and a stalled task opens none.
func TestPunctuatorOpensRoundsAtTheLSO(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := partsRuntime(t, func(c *Config) {
		c.Now = func() time.Time { return start }
		c.Punctuations = []Punctuation{{Name: "close", Interval: time.Minute, Fn: func(Task, time.Time) error { return nil }}}
	})
	pu := &r.punct
	for p := range int32(3) {
		pu.add(partsTask(r, p))
	}
	if s := pu.sched[0]; !s.nextPunct[0].Equal(start.Add(time.Minute)) || pu.needsRound(s, start) {
		t.Fatalf("scheduled at %v (due at start: %v), want one interval later", s.nextPunct[0], pu.needsRound(s, start))
	}
	r.stalls.punctuation(partsTask(r, 2), "close", errors.New("down"))
	tick := start.Add(time.Minute)
	lsos := kadm.ListedOffsets{"in": {0: {Topic: "in", Partition: 0, Offset: 42}}}
	pu.applyLSOs(lsoRead{at: tick, lsos: lsos})
	if rd := pu.sched[0].round; rd == nil || rd.lso != 42 || !rd.at.Equal(tick) {
		t.Fatalf("partition 0 round %+v, want one at the tick and LSO 42", rd)
	}
	if pu.sched[1].round != nil || pu.sched[2].round != nil {
		t.Fatal("a round opened without an LSO or while stalled")
	}
	if got := value(t, r.m.deferred.WithLabelValues("parts", "lso_unavailable")); got != 1 {
		t.Fatalf("deferred{lso_unavailable} = %v, want 1 (partition 1)", got)
	}
	if !pu.lso.retryAt.After(time.Now()) {
		t.Fatal("a failed read does not hold the next one back")
	}
	pu.remove(0)
	if len(pu.sched) != 2 {
		t.Fatalf("%d schedules after remove, want 2", len(pu.sched))
	}
}
