package loadgen

import (
	"math"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// Target names where a run writes its events.
const (
	ToMySQL = "mysql" // room_outbox rows, relayed by roomflow relay
	ToKafka = "kafka" // records straight on the room events topic
)

// Load is the shape and the faults of a sustained run (Stream, Drive):
// traffic in wall-clock time for Duration at Rate, Zipf-skewed rooms,
// log-normal session lengths. Its keys in Validate's errors are the field
// names in snake case ("hot_room_skew"); cmd/roomflow re-keys them to its
// flags.
type Load struct {
	To       string        // ToMySQL or ToKafka
	Duration time.Duration // how long new traffic is generated
	Rate     float64       // events per second once ramped up
	// Ramp raises the rate linearly from 0 to Rate over its length (0:
	// full rate from the start).
	Ramp time.Duration
	// Writers write concurrently, each its own transactions of up to
	// Batch rows; a room's rows all go to one writer, so each is written
	// after the previous one of its room committed.
	Writers int
	Batch   int
	// HotRoomSkew is the Zipf s (> 1) of the rooms gifts, joins and heat
	// changes go to: the larger, the more traffic the hottest rooms take.
	HotRoomSkew float64
	// SessionMedian and SessionP99 fit the log-normal distribution of
	// mic session lengths (seat to down).
	SessionMedian, SessionP99 time.Duration
	// PublishFailureShare of sessions never confirm publishing.
	PublishFailureShare float64
	// RedeliveryShare of events are produced twice (ToKafka only:
	// room_outbox forbids a repeated event_id).
	RedeliveryShare float64
	// MalformedShare of rows carry a payload that is no EventEnvelope:
	// the room processor dead-letters them (decode_envelope).
	MalformedShare float64
	// LateCommitShare of transactions stay open for LateCommitHold before
	// they commit, so outbox ids commit out of order (ToMySQL only; keep
	// the hold below relay.gap_max_age or the relay gives those ids up).
	LateCommitShare float64
	LateCommitHold  time.Duration
}

// DefaultLoad is an evening's shape at 500 events/s for a minute.
func DefaultLoad() Load {
	return Load{To: ToMySQL, Duration: time.Minute, Rate: 500, Writers: 4, Batch: 200, HotRoomSkew: 1.2,
		SessionMedian: 20 * time.Minute, SessionP99: 3 * time.Hour, PublishFailureShare: 0.05,
		LateCommitHold: 2 * time.Second}
}

// Validate reports every invalid field (a cfgerr.FieldError each).
func (l Load) Validate() error {
	var c cfgerr.Checks
	if l.To != ToMySQL && l.To != ToKafka {
		c.Bad("to", "must be %s or %s (got %q)", ToMySQL, ToKafka, l.To)
	}
	c.PositiveDuration("duration", l.Duration)
	if !(l.Rate > 0) || math.IsInf(l.Rate, 0) {
		c.Bad("rate", "must be > 0 events per second (got %v)", l.Rate)
	}
	if l.Ramp < 0 || l.Ramp > l.Duration {
		c.Bad("ramp", "must be between 0 and the duration (got %s)", l.Ramp)
	}
	c.Positive("writers", l.Writers)
	c.Positive("batch", l.Batch)
	if !(l.HotRoomSkew > 1) || math.IsInf(l.HotRoomSkew, 0) {
		c.Bad("hot_room_skew", "must be > 1, the Zipf s (got %v)", l.HotRoomSkew)
	}
	c.PositiveDuration("session_median", l.SessionMedian)
	if l.SessionP99 <= l.SessionMedian {
		c.Bad("session_p99", "must be above session_median (got %s <= %s)", l.SessionP99, l.SessionMedian)
	}
	share := func(key string, v float64) {
		if !(v >= 0 && v <= 1) {
			c.Bad(key, "must be a share between 0 and 1 (got %v)", v)
		}
	}
	share("publish_failure_share", l.PublishFailureShare)
	share("redelivery_share", l.RedeliveryShare)
	share("malformed_share", l.MalformedShare)
	share("late_commit_share", l.LateCommitShare)
	if l.RedeliveryShare > 0 && l.To == ToMySQL {
		c.Bad("redelivery_share", "needs to=%s: room_outbox forbids a repeated event_id", ToKafka)
	}
	if l.LateCommitShare > 0 {
		if l.To == ToKafka {
			c.Bad("late_commit_share", "needs to=%s: it holds room_outbox transactions open", ToMySQL)
		}
		c.PositiveDuration("late_commit_hold", l.LateCommitHold)
	}
	return c.Err()
}

// RateAt is the rate (events/s) the schedule asks elapsed into the run:
// rising linearly over Ramp, then Rate.
func (l Load) RateAt(elapsed time.Duration) float64 {
	if l.Ramp <= 0 || elapsed >= l.Ramp {
		return l.Rate
	}
	return l.Rate * max(float64(elapsed), 0) / float64(l.Ramp)
}

// timeOf is when into the run the schedule reaches n events: the rate
// rises linearly from 0 to Rate over Ramp (n = Rate·t²/2·Ramp), then
// stays at Rate.
func (l Load) timeOf(n float64) time.Duration {
	ramp := l.Ramp.Seconds()
	if rampEvents := l.Rate * ramp / 2; n >= rampEvents {
		return l.Ramp + time.Duration((n-rampEvents)/l.Rate*float64(time.Second))
	}
	return time.Duration(math.Sqrt(2*n*ramp/l.Rate) * float64(time.Second))
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// lognormal returns the μ and σ (of ln milliseconds) of the log-normal
// whose median and 99th percentile are those given.
func lognormal(median, p99 time.Duration) (mu, sigma float64) {
	mu = math.Log(float64(median.Milliseconds()))
	return mu, (math.Log(float64(p99.Milliseconds())) - mu) / z99
}
