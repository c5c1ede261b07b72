package rttest_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/processors/streams/rttest"
)

// counter counts records per key in the store and emits the count; value
// "reject" is rejected and "fail" fails transiently, both after writing
// and emitting, which the step must undo.
var counter = streams.ProcessorFunc(func(t streams.Task, rec *kgo.Record) error {
	b, _ := t.Store().Get(string(rec.Key))
	n, _ := strconv.Atoi(string(b))
	n++
	t.Store().Put(string(rec.Key), []byte(strconv.Itoa(n)))
	t.Emit(&kgo.Record{Topic: "out", Key: rec.Key, Value: t.StringBytes(strconv.Itoa(n))})
	switch string(rec.Value) {
	case "reject":
		return streams.Reject("bad", errors.New("rejected"))
	case "fail":
		return errors.New("lookup down")
	}
	return nil
})

func rec(key, value string) *kgo.Record { return &kgo.Record{Key: []byte(key), Value: []byte(value)} }

func TestDriverStepContract(t *testing.T) {
	d := rttest.NewDriver(t, rttest.DriverConfig{Input: "in", Stateful: true}, counter)
	d.MustFeed(rec("a", ""), rec("a", "reject"), rec("a", ""))
	if err := d.Feed(rec("a", ""), rec("a", "fail"), rec("a", "")); err == nil || err.Error() != "lookup down" {
		t.Fatalf("feed error %v, want the transient one", err)
	}
	var got []string
	for _, r := range d.Output("out") {
		got = append(got, string(r.Value))
	}
	// The reject's and the failure's count and emit are undone; the feed
	// stops at the failure.
	if want := []string{"1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("output %v, want %v", got, want)
	}
	if dl := d.DeadLetters(); len(dl) != 1 || dl[0].Reason != "bad" || dl[0].Record.Offset != 1 {
		t.Fatalf("dead letters %+v", dl)
	}
	if v, _ := d.Store(0).Get("a"); string(v) != "3" {
		t.Fatalf("store a=%s, want 3", v)
	}
}

func TestDriverPunctuate(t *testing.T) {
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := rttest.NewDriver(t, rttest.DriverConfig{Input: "in", Stateful: true, Clock: clock}, counter)
	d.MustFeed(rec("a", ""), &kgo.Record{Partition: 2, Key: []byte("b")})
	clock.Advance(time.Hour)
	var seen []string
	err := d.Punctuate(func(t streams.Task, now time.Time) error {
		if !now.Equal(clock.Now()) {
			return errors.New("punctuation at the wrong time")
		}
		seen = append(seen, strconv.Itoa(int(t.Partition())))
		t.Store().Delete("a")
		t.Store().Delete("b")
		return nil
	})
	if err != nil || !slices.Equal(seen, []string{"0", "2"}) {
		t.Fatalf("punctuations on %v: %v", seen, err)
	}
	if d.Store(0).Len() != 0 || d.Store(2).Len() != 0 {
		t.Fatal("punctuation's deletes not committed")
	}
}

// TestDriverPunctuateCatchUp: a run that calls MoreDue runs again at the
// same time, round after round, until a run does not call it; a failing run
// ends its task's catch-up with its own step undone and the earlier runs
// kept, while the other tasks go on.
func TestDriverPunctuateCatchUp(t *testing.T) {
	clock := rttest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := rttest.NewDriver(t, rttest.DriverConfig{Input: "in", Stateful: true, Clock: clock}, counter)
	d.MustFeed(rec("a", ""), &kgo.Record{Partition: 2, Key: []byte("b")})
	clock.Advance(time.Hour)
	var seen []string
	err := d.Punctuate(func(t streams.Task, now time.Time) error {
		if !now.Equal(clock.Now()) {
			return errors.New("catch-up run at another time")
		}
		b, _ := t.Store().Get("runs")
		n, _ := strconv.Atoi(string(b))
		n++
		t.Store().Put("runs", []byte(strconv.Itoa(n)))
		t.Emit(&kgo.Record{Topic: "tick", Value: t.StringBytes(strconv.Itoa(n))})
		seen = append(seen, strconv.Itoa(int(t.Partition())))
		switch {
		case t.Partition() == 0 && n < 3, t.Partition() == 2 && n == 1:
			t.MoreDue()
		case t.Partition() == 2 && n == 2:
			t.MoreDue() // undone with the step: no further run
			return errors.New("batch failed")
		}
		return nil
	})
	if err == nil || err.Error() != "batch failed" {
		t.Fatalf("punctuate error %v, want the failed batch", err)
	}
	if want := []string{"0", "2", "0", "2", "0"}; !slices.Equal(seen, want) {
		t.Fatalf("runs on %v, want %v", seen, want)
	}
	if n := len(d.Output("tick")); n != 4 {
		t.Fatalf("%d punctuation records, want 4 (3 runs on 0, 1 kept on 2)", n)
	}
	for p, want := range map[int32]string{0: "3", 2: "1"} {
		if v, _ := d.Store(p).Get("runs"); string(v) != want {
			t.Errorf("partition %d: %s runs committed, want %s", p, v, want)
		}
	}
}
