package verify

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/producers/loadgen"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/schemas/userv1"
)

// TotalsReport counts what Totals compared.
type TotalsReport struct {
	Lifetime, Daily int // keys of the totals topics compared
	LifetimeRows    int // user_mic_lifetime_stats rows of the app
}

// totalsRow is the part of a fact row a total carries.
type totalsRow struct{ Seat, Online, Sessions, Rooms, First, Last int64 }

// unmarshalTotal decodes a totals record, plain or Confluent-framed (the
// writers frame them in kafka.public_wire_format confluent).
func unmarshalTotal(r *kgo.Record, m proto.Message) error {
	value, err := envelope.Payload(r)
	if err != nil {
		return err
	}
	return proto.Unmarshal(value, m)
}

// Totals compares, for cfg.AppCode, the current value of every key of the
// totals topics (the last committed record, none after a tombstone) with
// user_mic_lifetime_stats and user_mic_daily_stats, and, once any
// lifetime total exists (the bootstrap ran), that every lifetime row has
// one. A daily total is
// compared while its day is in the topic; days past
// mic.day_totals_retention have none. It needs the sink caught up with
// the mic processor, as the other comparisons do.
func Totals(ctx context.Context, cfg *config.Config, db *sql.DB, idle time.Duration) (TotalsReport, []loadgen.Diff, error) {
	var rep TotalsReport
	var diffs []loadgen.Diff
	if !cfg.Mic.TotalsEnabled {
		return rep, nil, nil
	}
	life := map[string]totalsRow{}
	err := readTopic(ctx, cfg, cfg.Kafka.Topics.MicLifetimeTotals, idle, func(r *kgo.Record) {
		if r.Value == nil {
			delete(life, string(r.Key)) // a tombstone: the key has no total
			return
		}
		var m userv1.UserMicLifetimeTotals
		if err := unmarshalTotal(r, &m); err != nil {
			diffs = append(diffs, loadgen.Diff{Table: "mic lifetime totals record", Key: string(r.Key), Want: "a UserMicLifetimeTotals", Got: err.Error()})
			return
		}
		if m.AppCode != cfg.AppCode {
			return // compared per app, like the other facts
		}
		life[string(r.Key)] = totalsRow{m.SeatOccupiedMs, m.MicOnlineMs, m.SessionCount, 0, m.FirstMicAtMs, m.LastMicAtMs}
	})
	if err != nil {
		return rep, nil, err
	}
	daily := map[string]totalsRow{}
	err = readTopic(ctx, cfg, cfg.Kafka.Topics.MicDailyTotals, idle, func(r *kgo.Record) {
		if r.Value == nil {
			delete(daily, string(r.Key)) // a tombstone: the key has no total
			return
		}
		var m userv1.UserMicDailyTotals
		if err := unmarshalTotal(r, &m); err != nil {
			diffs = append(diffs, loadgen.Diff{Table: "mic daily totals record", Key: string(r.Key), Want: "a UserMicDailyTotals", Got: err.Error()})
			return
		}
		if m.AppCode != cfg.AppCode {
			return
		}
		daily[string(r.Key)] = totalsRow{m.SeatOccupiedMs, m.MicOnlineMs, m.SessionCount, m.RoomCount, m.FirstMicAtMs, m.LastMicAtMs}
	})
	if err != nil {
		return rep, nil, err
	}
	rep.Lifetime, rep.Daily = len(life), len(daily)
	seen := map[string]bool{}
	err = loadgen.ScanRows(ctx, db, "SELECT app_code, user_id, seat_occupied_ms, mic_online_ms, session_count, first_mic_at_ms, last_mic_at_ms FROM user_mic_lifetime_stats WHERE app_code = ?",
		cfg.AppCode, func(rows *sql.Rows) error {
			var app string
			var user int64
			var f totalsRow
			if err := rows.Scan(&app, &user, &f.Seat, &f.Online, &f.Sessions, &f.First, &f.Last); err != nil {
				return err
			}
			rep.LifetimeRows++
			key := app + ":" + strconv.FormatInt(user, 10)
			seen[key] = true
			got, ok := life[key]
			switch {
			case ok && got != f:
				diffs = append(diffs, loadgen.Diff{Table: "mic lifetime totals", Key: key, Want: fmt.Sprintf("%+v", f), Got: fmt.Sprintf("%+v", got)})
			case !ok && len(life) > 0:
				diffs = append(diffs, loadgen.Diff{Table: "mic lifetime totals", Key: key, Want: fmt.Sprintf("%+v", f), Got: "none"})
			}
			return nil
		})
	if err != nil {
		return rep, nil, fmt.Errorf("verify: read user_mic_lifetime_stats: %w", err)
	}
	for key, got := range life {
		if !seen[key] {
			diffs = append(diffs, loadgen.Diff{Table: "mic lifetime totals", Key: key, Want: "no user_mic_lifetime_stats row", Got: fmt.Sprintf("%+v", got)})
		}
	}
	err = loadgen.ScanRows(ctx, db, "SELECT app_code, user_id, stat_date, seat_occupied_ms, mic_online_ms, session_count, room_count, first_mic_at_ms, last_mic_at_ms FROM user_mic_daily_stats WHERE app_code = ?",
		cfg.AppCode, func(rows *sql.Rows) error {
			var app, date string
			var user int64
			var f totalsRow
			if err := rows.Scan(&app, &user, &date, &f.Seat, &f.Online, &f.Sessions, &f.Rooms, &f.First, &f.Last); err != nil {
				return err
			}
			key := app + ":" + strconv.FormatInt(user, 10) + ":" + date
			if got, ok := daily[key]; ok && got != f {
				diffs = append(diffs, loadgen.Diff{Table: "mic daily totals", Key: key, Want: fmt.Sprintf("%+v", f), Got: fmt.Sprintf("%+v", got)})
			}
			delete(daily, key)
			return nil
		})
	if err != nil {
		return rep, nil, fmt.Errorf("verify: read user_mic_daily_stats: %w", err)
	}
	for key, got := range daily {
		diffs = append(diffs, loadgen.Diff{Table: "mic daily totals", Key: key, Want: "no user_mic_daily_stats row", Got: fmt.Sprintf("%+v", got)})
	}
	return rep, diffs, nil
}
