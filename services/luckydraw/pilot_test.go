package luckydraw_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/services/luckydraw"
)

// Pilot rooms: with pilot_mode on (here its start value) only the listed
// rooms draw; the others are rejected room_not_in_pilot by Check and by
// Execute (recorded, and answered again on a retry); an empty list warns;
// the list holds at most 50 rooms; the overrides and `default` act like
// the other switches.
func TestPilotRooms(t *testing.T) {
	var logs bytes.Buffer
	e := start(t, luckydraw.Config{PilotMode: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, 100_000)
	ctx := context.Background()
	if err := e.svc.WarnEmptyPilot(ctx); err != nil || !strings.Contains(logs.String(), "level=WARN msg=\"pilot_mode is on and the pilot room list is empty") {
		t.Fatalf("pilot_mode on at start with no pilot room must log a WARN: %v\n%s", err, logs.String())
	}
	a, err := luckydraw.NewAdmin(e.db, luckydraw.AdminConfig{Operator: "test", PilotMode: true})
	if err != nil {
		t.Fatal(err)
	}
	on, off := true, false
	set := func(name, room string, v *bool) luckydraw.Change {
		t.Helper()
		c, err := a.SetSwitch(ctx, app, name, room, v)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	check := func(room string) string {
		t.Helper()
		r, err := e.client.CheckLuckyGift(ctx, &activityv1.CheckLuckyGiftRequest{Meta: &activityv1.LuckyGiftMeta{RoomId: room}, GiftId: "rose"})
		if err != nil {
			t.Fatal(err)
		}
		return r.RejectReason
	}
	draw := func(cmd, room string) string {
		t.Helper()
		req := drawReq(cmd, 1)
		req.Meta.RoomId = room
		r, err := e.client.ExecuteLuckyGiftDraw(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.RejectReason
	}
	if r := check("r1"); r != luckydraw.RejectRoomNotInPilot {
		t.Fatalf("check with pilot mode on and no pilot room: %q", r)
	}
	if r := draw("p1", "r1"); r != luckydraw.RejectRoomNotInPilot {
		t.Fatalf("execute with pilot mode on and no pilot room: %q", r)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE command_id = 'p1' AND reward_status = 'rejected'
	AND reject_reason = 'room_not_in_pilot'`); n != 1 {
		t.Fatalf("%d recorded rejections of p1", n)
	}
	if c := set(luckydraw.SwitchPilotRoom, "r9", &off); !strings.Contains(c.Warning, "list is empty") {
		t.Fatalf("pilot mode on (start value) with an empty list must warn: %+v", c)
	}
	if c := set(luckydraw.SwitchPilotRoom, "r1", &on); c.Warning != "" || c.Note != "1 pilot rooms" {
		t.Fatalf("first pilot room: %+v", c)
	}
	if r := check("r1"); r != "" {
		t.Fatalf("check in a pilot room: %q", r)
	}
	if r := draw("p2", "r1"); r != "" {
		t.Fatalf("draw in a pilot room: %q", r)
	}
	if r := draw("p1", "r1"); r != luckydraw.RejectRoomNotInPilot {
		t.Fatalf("a retry of the rejected p1 answered %q", r)
	}
	if r := check("r2"); r != luckydraw.RejectRoomNotInPilot {
		t.Fatalf("check outside the pilot: %q", r)
	}
	for i := 2; i <= luckydraw.MaxPilotRooms; i++ {
		set(luckydraw.SwitchPilotRoom, fmt.Sprintf("pr-%d", i), &on)
	}
	if c := set(luckydraw.SwitchPilotRoom, "r1", &on); c.Note != "50 pilot rooms" {
		t.Fatalf("re-adding a listed room: %+v", c)
	}
	logged := e.count(t, `SELECT COUNT(*) FROM lucky_admin_log`)
	if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchPilotRoom, "pr-51", &on); !errors.Is(err, luckydraw.ErrPilotFull) {
		t.Fatalf("a 51st pilot room: %v", err)
	}
	if n := e.count(t, `SELECT COUNT(*) FROM lucky_switches WHERE scope_id = 'pr-51'`) + e.count(t, `SELECT COUNT(*) FROM lucky_admin_log`) - logged; n != 0 {
		t.Fatal("the refused 51st pilot room wrote")
	}
	set(luckydraw.SwitchPilotMode, "", &off)
	if r := draw("p3", "r2"); r != "" {
		t.Fatalf("pilot mode off: %q", r)
	}
	set(luckydraw.SwitchPilotMode, "", nil) // back to the start value: on
	if r := draw("p4", "r2"); r != luckydraw.RejectRoomNotInPilot {
		t.Fatalf("pilot mode back to its start value: %q", r)
	}
	e.checkInvariants(t)
}

// The per-room metrics exist for the pilot rooms only: the draws, hits,
// coins in and out and rejections the service committed there (a retry
// answered from the record counts nothing), none for other rooms, and a
// room taken off the list loses its series.
func TestPilotRoomMetrics(t *testing.T) {
	e := start(t, luckydraw.Config{}, 100_000)
	ctx := context.Background()
	a := testAdmin(t, e.db)
	on := true
	if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchPilotRoom, "r1", &on); err != nil {
		t.Fatal(err)
	}
	draw := func(cmd, room string) {
		t.Helper()
		req := drawReq(cmd, 1)
		req.Meta.RoomId = room
		if _, err := e.client.ExecuteLuckyGiftDraw(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		draw(fmt.Sprintf("m%d", i), "r1")
	}
	draw("m0", "r1") // a retry: the stored draw
	draw("o1", "r2")
	if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchRoomScopePaused, "r1", &on); err != nil {
		t.Fatal(err)
	}
	draw("m-paused", "r1")
	out := e.count(t, `SELECT SUM(reward_coins) FROM lucky_draw_records WHERE room_id = 'r1'`)
	hits := e.count(t, `SELECT COUNT(*) FROM lucky_draw_records WHERE room_id = 'r1' AND reward_coins > 0`)
	for _, c := range []struct {
		metric string
		want   float64
	}{
		{"roomflow_lucky_pilot_room_draws_total", 5},
		{"roomflow_lucky_pilot_room_hits_total", float64(hits)},
		{"roomflow_lucky_pilot_room_coins_in_total", 500},
		{"roomflow_lucky_pilot_room_coins_out_total", float64(out)},
		{"roomflow_lucky_pilot_room_rejections_total", 1},
	} {
		if g := e.gauges(t, c.metric, "room_id"); len(g) != 1 || g["r1"] != c.want {
			t.Errorf("%s %v, want only r1 at %v", c.metric, g, c.want)
		}
	}
	off := false
	if _, err := a.SetSwitch(ctx, app, luckydraw.SwitchPilotRoom, "r1", &off); err != nil {
		t.Fatal(err)
	}
	draw("o2", "r2")
	if g := e.gauges(t, "roomflow_lucky_pilot_room_draws_total", "room_id"); len(g) != 0 {
		t.Fatalf("series left after r1 left the pilot list: %v", g)
	}
}
