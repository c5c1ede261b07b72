package mic_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/processors/mic"
)

var updateRecords = flag.Bool("update-records", false, "rewrite testdata/records-v1 from this release's encoders")

// TestPublicRecordsGolden pins the bytes of the public records
// (UserMicSessionClosed, the daily and lifetime deltas) a fixed session
// produces: a session across a UTC midnight, so it closes with two daily
// records. The files were written by the release before the codec work on
// the mic processor; an encoder that changes a byte of a public record
// fails here, as does an engine that computes another value. Each file
// also decodes with the generated code to the record the engine returned.
func TestPublicRecordsGolden(t *testing.T) {
	st := mic.NewMapState()
	before := ms("2026-11-29T23:50:00Z")
	steps := []mic.Event{
		e("g-up", "up", before, roomVersion(10), seat(3)),
		e("g-pub", "publish_confirmed", before+5*sec, pubAt(before+4*sec), roomVersion(11), seat(3)),
		e("g-change", "change", before+20*mins, roomVersion(12), seat(5), func(ev *mic.Event) { ev.PreviousSeatNo = 3 }),
		e("g-down", "down", before+35*mins, reason("kick"), rtcStop(before+34*mins), roomVersion(13), seat(5)),
	}
	var out mic.Output
	for _, ev := range steps {
		out = mic.Handle(st, &ev)
	}
	if out.Closed == nil || len(out.Daily) != 2 || out.Lifetime == nil {
		t.Fatalf("the session did not close with two days: %+v", out)
	}
	records := map[string]struct {
		b   []byte
		msg proto.Message
	}{
		"session-closed.bin": {mic.AppendSessionClosed(nil, out.Closed), out.Closed},
		"lifetime.bin":       {mic.AppendLifetimeStatsUpdated(nil, out.Lifetime), out.Lifetime},
	}
	for i, d := range out.Daily {
		records[fmt.Sprintf("daily-%d.bin", i)] = struct {
			b   []byte
			msg proto.Message
		}{mic.AppendDailyStatsUpdated(nil, d), d}
	}
	for name, r := range records {
		path := filepath.Join("testdata", "records-v1", name)
		if *updateRecords {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, r.b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.b, want) {
			t.Errorf("%s: this release writes other bytes than the golden record\n got %x\nwant %x", name, r.b, want)
		}
		got := r.msg.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(want, got); err != nil || !proto.Equal(got, r.msg) {
			t.Errorf("%s: golden bytes decode to %v (error %v), the engine returned %v", name, got, err, r.msg)
		}
	}
}
