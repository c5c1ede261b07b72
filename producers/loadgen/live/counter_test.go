package live_test

import (
	"sync"
	"testing"
	"time"

	"github.com/hyapp/roomflow/producers/loadgen/live"
)

func TestCounter(t *testing.T) {
	var c live.Counter
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				c.Add(2)
				c.Late(time.Duration(w*100+i-50) * time.Millisecond) // on time below 0
			}
		})
	}
	wg.Wait()
	c.SetTarget(5000)
	c.SetRate(250.5)
	want := live.Counts{Written: 1600, Target: 5000, TargetRate: 250.5, LateBatches: 800 - 51, LateMax: 749 * time.Millisecond}
	if got := c.Counts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}
