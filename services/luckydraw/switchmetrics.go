package luckydraw

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// switchStateDesc is roomflow_lucky_switch_state: each global kill switch
// of the service's app_code as the draws see it (override, else start
// value), 1 on, 0 off; alert LuckyWalletDispatchOff reads it.
var switchStateDesc = prometheus.NewDesc("roomflow_lucky_switch_state",
	"Global lucky kill switches as draws see them (operator override, else lucky.switches.*): 1 on, 0 off.",
	[]string{"app_code", "name"}, nil)

// switchCollector reads the switches at scrape time through the service's
// 1 s cache, so a scrape costs at most one small query a second; a failed
// read exposes no series rather than a stale one.
type switchCollector struct {
	sw  *switches
	app string
}

func (c switchCollector) Describe(ch chan<- *prometheus.Desc) { ch <- switchStateDesc }

func (c switchCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := c.sw.get(ctx, c.app)
	if err != nil {
		return
	}
	for _, name := range []string{SwitchGlobal, SwitchLargeTier, SwitchWalletDispatch, SwitchPilotMode} {
		on := 0.0
		if v.global[name] {
			on = 1
		}
		ch <- prometheus.MustNewConstMetric(switchStateDesc, prometheus.GaugeValue, on, c.app, name)
	}
}
