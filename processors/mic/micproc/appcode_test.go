package micproc_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// TestEmptyAppCodeIsTheConfiguredOne: events without app_code belong to the
// configured app_code, like everywhere else in the pipeline. A session whose
// events name it and the same session whose later events leave it out give
// the same facts (one session, same times, app_code set), and nothing goes
// to the DLQ (today's code dead-lettered them as missing_app_code).
func TestEmptyAppCodeIsTheConfiguredOne(t *testing.T) {
	e := newMemEnv(t, 1, matrixClock)
	e.cfg.AppCode = "hy"
	noApp := func(ev *mic.Event) { ev.AppCode = "" }
	named := &sess{u: 5, room: "r", id: "ms-5"}
	mixed := &sess{u: 6, room: "r", id: "ms-6"}
	e.produce([]mic.Event{
		named.ev("up", base), named.ev("publish_confirmed", base+sec), named.ev("down", base+mins),
		mixed.ev("up", base), mixed.ev("publish_confirmed", base+sec, noApp), mixed.ev("down", base+mins, noApp),
	})
	o := e.collect(6, 0)
	if len(o.dlq) != 0 {
		t.Fatalf("%d records dead-lettered, want none", len(o.dlq))
	}
	for _, l := range o.ledger {
		if l.AppCode != "hy" || l.Status != "consumed" {
			t.Fatalf("ledger entry %v", l)
		}
	}
	a, b := closedOnce(t, o.forUser(5)), closedOnce(t, o.forUser(6))
	a, b = proto.Clone(a).(*userv1.UserMicSessionClosed), proto.Clone(b).(*userv1.UserMicSessionClosed)
	for _, c := range []*userv1.UserMicSessionClosed{a, b} {
		c.EventId, c.MicSessionId, c.UserId, c.ClosedEventId = "", "", 0, ""
	}
	if a.AppCode != "hy" || !proto.Equal(a, b) {
		t.Fatalf("closed sessions differ:\n named %v\n mixed %v", a, b)
	}
}
