package luckyoutbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
)

type metrics struct {
	claimed      *prometheus.CounterVec
	done         *prometheus.CounterVec
	retries      *prometheus.CounterVec
	paused       prometheus.Counter
	rewardFailed prometheus.Counter
	walletCall   *prometheus.HistogramVec
	pollErrors   prometheus.Counter
	backlog      *prometheus.GaugeVec
	rewardOldest prometheus.Gauge
	eventOldest  *prometheus.GaugeVec
	creditGroup  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_lucky_outbox_claimed_total",
			Help: "lucky_outbox rows claimed, by event_type (reward_credit|activity_event: events, a lucky_draw_events row counting its events) and path (worker|sync).",
		}, []string{"event_type", "path"}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_lucky_outbox_done_total",
			Help: "lucky_outbox rows done: rewards granted, events produced to Kafka (a lucky_draw_events row counting its events), by event_type.",
		}, []string{"event_type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_lucky_outbox_retries_total",
			Help: "Failed wallet credits or produces put back for a retry with backoff, by event_type (activity_event: events, a lucky_draw_events row retried whole counting its events).",
		}, []string{"event_type"}),
		paused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_lucky_outbox_dispatch_paused_total",
			Help: "Reward credits left pending, uncalled and uncounted, because wallet_credit_dispatch was off.",
		}),
		rewardFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_lucky_reward_failed_total",
			Help: "Rewards whose wallet credit exhausted lucky.outbox_max_retries (reward_status=failed; re-drive with `roomflow lucky rewards retry`).",
		}),
		walletCall: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomflow_lucky_outbox_wallet_call_seconds",
			Help:    "CreditLuckyReward call latency, by path (worker|sync) and result (ok|error|timeout).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"path", "result"}),
		pollErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_lucky_outbox_poll_errors_total",
			Help: "Polls that failed (MySQL errors): retried after poll_interval.",
		}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_lucky_outbox_backlog",
			Help: "lucky_outbox rows not done, by event_type and status (pending|processing|failed); activity_event counts events, a lucky_draw_events row as its events.",
		}, []string{"event_type", "status"}),
		rewardOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_lucky_reward_pending_oldest_seconds",
			Help: "Age of the oldest draw whose reward credit is still pending (0: none); alert LuckyRewardPendingTooLong.",
		}),
		eventOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "roomflow_lucky_outbox_oldest_seconds",
			Help: "Age of the oldest lucky event not yet published to Kafka, by event_type (its message: LuckyGiftDrawn, ...; 0: none); alert LuckyEventBacklogOld.",
		}, []string{"event_type"}),
		creditGroup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_lucky_credit_group_rewards",
			Help:    "Rewards per synchronous credit group (one committed draw batch's, or several batches' merged while every turn was taken).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
	}
	m.claimed = promreg.Register(reg, m.claimed)
	m.done = promreg.Register(reg, m.done)
	m.retries = promreg.Register(reg, m.retries)
	m.paused = promreg.Register(reg, m.paused)
	m.rewardFailed = promreg.Register(reg, m.rewardFailed)
	m.walletCall = promreg.Register(reg, m.walletCall)
	m.pollErrors = promreg.Register(reg, m.pollErrors)
	m.backlog = promreg.Register(reg, m.backlog)
	m.rewardOldest = promreg.Register(reg, m.rewardOldest)
	m.eventOldest = promreg.Register(reg, m.eventOldest)
	m.creditGroup = promreg.Register(reg, m.creditGroup)
	for _, t := range EventMessageTypes() {
		m.eventOldest.WithLabelValues(t)
	}
	// Series at 0 before the first event, so rate() and increase() see it.
	for _, t := range []string{EventTypeRewardCredit, EventTypeActivityEvent} {
		m.claimed.WithLabelValues(t, "worker")
		m.done.WithLabelValues(t)
		m.retries.WithLabelValues(t)
		for _, st := range []string{StatusPending, StatusProcessing, StatusFailed} {
			m.backlog.WithLabelValues(t, st)
		}
	}
	m.claimed.WithLabelValues(EventTypeRewardCredit, "sync")
	return m
}
