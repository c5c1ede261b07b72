package imoutbox_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// outbox_worker.node_id is cut to 48 bytes to leave room for the random
// suffix in room_outbox.worker_id; a cut inside a multi-byte character
// made the worker id invalid UTF-8, which MySQL refuses (1366, strict
// mode) at every claim, so the scan delivered nothing. The cut keeps whole
// characters and the row is claimed and delivered.
func TestLongNodeIDKeepsWholeCharacters(t *testing.T) {
	e := newEnv(t, false)
	e.cfg.NodeID = strings.Repeat("n", 47) + "节点" // the 48th byte is inside 节
	e.insert(time.Second, gift("node-1", "r1", 1))
	s := e.service()
	if w := s.WorkerID(); !utf8.ValidString(w) || !strings.HasPrefix(w, strings.Repeat("n", 47)+"-") {
		t.Fatalf("worker id %q: want the 47 whole bytes and the suffix, valid UTF-8", w)
	}
	if err := s.ProcessPendingOutbox(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.row("node-1"); r.Status != "delivered" || r.WorkerID != s.WorkerID() {
		t.Fatalf("row %+v, want delivered by %s", r, s.WorkerID())
	}
}
