package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
)

func TestRegisterSharesIdenticalCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "roomflow_test_things_total", Help: "Things."}
	a := promreg.Register(reg, prometheus.NewCounter(opts))
	b := promreg.Register(reg, prometheus.NewCounter(opts))
	if a != b {
		t.Fatal("the second identical counter was not replaced by the registered one")
	}
	a.Inc()
	if got := promreg.Register[prometheus.Counter](nil, prometheus.NewCounter(opts)); got == a {
		t.Fatal("a nil registerer must return the collector given")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a different collector under the same name must panic")
		}
	}()
	promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "roomflow_test_things_total", Help: "Other."}))
}
