package loadgen

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/roomv1"
)

func TestLoadValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Load)
		keys []string
	}{
		{"default", func(*Load) {}, nil},
		{"kafka with redelivery", func(l *Load) { l.To, l.RedeliveryShare = ToKafka, 0.1 }, nil},
		{"mysql with late commits", func(l *Load) { l.LateCommitShare = 0.1 }, nil},
		{"unknown target", func(l *Load) { l.To = "file" }, []string{"to"}},
		{"no duration or rate", func(l *Load) { l.Duration, l.Rate = 0, 0 }, []string{"duration", "rate"}},
		{"ramp beyond duration", func(l *Load) { l.Ramp = 2 * time.Minute }, []string{"ramp"}},
		{"no writers, no batch", func(l *Load) { l.Writers, l.Batch = 0, -1 }, []string{"writers", "batch"}},
		{"skew not above 1", func(l *Load) { l.HotRoomSkew = 1 }, []string{"hot_room_skew"}},
		{"p99 below median", func(l *Load) { l.SessionP99 = l.SessionMedian }, []string{"session_p99"}},
		{"no median", func(l *Load) { l.SessionMedian = 0 }, []string{"session_median"}},
		{"shares out of range", func(l *Load) { l.PublishFailureShare, l.MalformedShare = 1.5, math.NaN() }, []string{"publish_failure_share", "malformed_share"}},
		{"redelivery into mysql", func(l *Load) { l.RedeliveryShare = 0.1 }, []string{"redelivery_share"}},
		{"late commits into kafka", func(l *Load) { l.To, l.LateCommitShare = ToKafka, 0.1 }, []string{"late_commit_share"}},
		{"late commits without a hold", func(l *Load) { l.LateCommitShare, l.LateCommitHold = 0.1, 0 }, []string{"late_commit_hold"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLoad()
			tc.edit(&l)
			if got := cfgerr.Keys(l.Validate()); !slices.Equal(got, tc.keys) {
				t.Fatalf("keys %v, want %v (%v)", got, tc.keys, l.Validate())
			}
		})
	}
}

// streamScenario is a stream over two UTC days in simulated time.
func streamScenario(users, rooms int) (Scenario, Load) {
	sc := DefaultScenario()
	sc.Users, sc.Rooms, sc.Start = users, rooms, time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	sc.Timers = &TimerPolicy{PendingPublishMaxAge: 2 * time.Minute, PublishingSessionMaxAge: 12 * time.Hour}
	sc.TimerMargin, sc.Abandoned = 40*time.Second, 0.05
	ld := DefaultLoad()
	ld.Duration, ld.Ramp = 48*time.Hour, time.Hour
	return sc, ld
}

// The stream's shape: commit order, room versions in order, gifts Zipf
// over rooms (room 0 takes the share Zipf gives it), session lengths with
// the median and p99 asked, the publish failure share, and the rate.
func TestStreamShape(t *testing.T) {
	sc, ld := streamScenario(2000, 100)
	ld.Rate, ld.Ramp, ld.Duration = 2, 0, 24*time.Hour // 172,800 events
	ld.HotRoomSkew, ld.SessionMedian, ld.SessionP99, ld.PublishFailureShare = 1.5, 10*time.Minute, 2*time.Hour, 0.2
	sc.Timers, sc.Abandoned = nil, 0
	s := NewStream(sc, ld)
	var (
		n, gifts, hot    int
		last             int64
		versions         = map[string]int64{}
		ups, published   = map[string]int64{}, map[string]bool{}
		lengths          []float64
		sessions, noPubs int
		env              envelope.View
		mic              envelope.MicChanged
	)
	for e, ok := s.Next(); ok; e, ok = s.Next() {
		n++
		if err := env.Parse(e.Payload); err != nil {
			t.Fatal(err)
		}
		if env.OccurredAtMs < last || env.RoomVersion != versions[string(env.RoomID)]+1 {
			t.Fatalf("event %d out of order: at %d after %d, version %d after %d", n, env.OccurredAtMs, last, env.RoomVersion, versions[string(env.RoomID)])
		}
		last, versions[string(env.RoomID)] = env.OccurredAtMs, env.RoomVersion
		switch string(env.EventType) {
		case "RoomGiftSent":
			gifts++
			if string(env.RoomID) == "room-0" {
				hot++
			}
		case "RoomMicChanged":
			if mic.Parse(env.Payload) != nil {
				t.Fatal("mic payload")
			}
			id := string(mic.MicSessionID)
			switch string(mic.Action) {
			case "up":
				ups[id] = env.OccurredAtMs
			case "publish_confirmed":
				published[id] = true
			case "down":
				sessions++
				lengths = append(lengths, float64(env.OccurredAtMs-ups[id]))
				if !published[id] {
					noPubs++
				}
			}
		}
	}
	if want := ld.Rate * ld.Duration.Seconds(); math.Abs(float64(n)-want) > 0.05*want {
		t.Errorf("%d events, want about %.0f (rate %v over %s)", n, want, ld.Rate, ld.Duration)
	}
	// Zipf(s=1.5, v=1) over 100 rooms: P(room 0) = 1 / sum_k (k+1)^-1.5.
	var norm float64
	for k := range sc.Rooms {
		norm += math.Pow(float64(k+1), -1.5)
	}
	if share, want := float64(hot)/float64(gifts), 1/norm; math.Abs(share-want) > 0.02 {
		t.Errorf("room-0 took %.3f of %d gifts, want %.3f", share, gifts, want)
	}
	slices.Sort(lengths)
	q := func(p float64) time.Duration {
		return time.Duration(lengths[int(p*float64(len(lengths)-1))]) * time.Millisecond
	}
	if med := q(0.5); med < 9*time.Minute || med > 11*time.Minute {
		t.Errorf("median session %s of %d, want about %s", med, len(lengths), ld.SessionMedian)
	}
	if p99 := q(0.99); p99 < 100*time.Minute || p99 > 140*time.Minute {
		t.Errorf("p99 session %s, want about %s", p99, ld.SessionP99)
	}
	if share := float64(noPubs) / float64(sessions); math.Abs(share-0.2) > 0.02 {
		t.Errorf("%.3f of sessions never published, want 0.2", share)
	}
}

// A 2-day stream of 1,000,000 events over 100,000 users and 10,000 rooms
// folds into an oracle whose retained heap stays under 64 MiB: the oracle
// keeps facts, not events.
func TestOracleBoundedMemory(t *testing.T) {
	const events = 1_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	o := func() *Oracle {
		sc, ld := streamScenario(100_000, 10_000)
		ld.Rate = 1.05 * events / ld.Duration.Seconds()
		s := NewStream(sc, ld)
		b := NewOracleBuilder(map[RuleKey]LuckyRule{{sc.Rule.GiftID, sc.Rule.RuleVersion}: sc.Rule}, sc.AppCode, sc.Timers)
		for i := range events {
			e, ok := s.Next()
			if !ok {
				t.Fatal("the stream ended early")
			}
			if i%4096 == 0 {
				b.Expire(e.Envelope.OccurredAtMs) // as Drive does
			}
			b.Add(e.Payload)
		}
		return b.Oracle()
	}()
	runtime.GC()
	runtime.ReadMemStats(&after)
	retained := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d events: %d sessions, %d users, %d user-days, %d pools; retained heap %.1f MiB",
		o.Events, o.ClosedSessions, len(o.Lifetime), len(o.Daily), len(o.Pools), float64(retained)/(1<<20))
	if o.Events != events || o.ClosedSessions < 50_000 || len(o.Lifetime) < 50_000 || len(o.Daily) <= len(o.Lifetime) {
		t.Fatalf("oracle of %d events: %d sessions, %d users, %d user-days", o.Events, o.ClosedSessions, len(o.Lifetime), len(o.Daily))
	}
	if retained >= 64<<20 {
		t.Fatalf("retained heap %.1f MiB, want < 64 MiB", float64(retained)/(1<<20))
	}
	runtime.KeepAlive(o)
}

// Duplicates are recognised by the room's high-water mark and its last
// recentPerRoom event ids: a redelivery right after or a few events later
// counts once; a later run restarting a room's versions with new ids
// counts; a redelivery more than recentPerRoom events of its room later
// counts twice (the documented limit).
func TestOracleBuilderDuplicates(t *testing.T) {
	join := func(id, room string, version int64) []byte {
		return values(&roomv1.EventEnvelope{EventId: id, EventType: "RoomUserJoined", AppCode: "a", RoomId: room, RoomVersion: version})[0]
	}
	for _, tc := range []struct {
		name   string
		values [][]byte
		events int
	}{
		{"redelivered at once", [][]byte{join("e1", "r", 1), join("e1", "r", 1), join("e2", "r", 2)}, 2},
		{"redelivered later", [][]byte{join("e1", "r", 1), join("e2", "r", 2), join("f1", "s", 1), join("e1", "r", 1), join("e3", "r", 3)}, 4},
		{"another room's versions", [][]byte{join("e1", "r", 5), join("f1", "s", 1)}, 2},
		{"a run restarting the versions", [][]byte{join("e1", "r", 1), join("e2", "r", 2), join("x1", "r", 1), join("x2", "r", 2)}, 4},
		{"unversioned", [][]byte{join("u1", "r", 0), join("u2", "r", 0), join("u1", "r", 0)}, 2},
		{"beyond the ring", func() [][]byte {
			vs := [][]byte{join("e0", "r", 1)}
			for i := range recentPerRoom {
				vs = append(vs, join(fmt.Sprint("e", i+1), "r", int64(i+2)))
			}
			return append(vs, join("e0", "r", 1))
		}(), recentPerRoom + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewOracleBuilder(nil, "a", nil)
			for _, v := range tc.values {
				b.Add(v)
			}
			if got := b.Oracle().Events; got != tc.events {
				t.Fatalf("%d events, want %d", got, tc.events)
			}
		})
	}
}
