package luckystats

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

// Defaults of PayoutCollectorConfig.
const (
	DefaultPayoutWindow = 24 * time.Hour
	DefaultQueryTimeout = 2 * time.Second
)

// PayoutCollectorConfig configures NewPayoutCollector.
type PayoutCollectorConfig struct {
	// AppCode selects the app's rows of lucky_payout_stats_hourly and is
	// the app_code label of every series (required).
	AppCode string
	// Window is how far back the gauges sum the hourly facts, a whole
	// number of hours (default DefaultPayoutWindow): the current UTC hour
	// and the Window/1h - 1 before it.
	Window time.Duration
	// QueryTimeout bounds the query of one scrape (default
	// DefaultQueryTimeout).
	QueryTimeout time.Duration
	// Logger receives failed queries (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now; tests).
	Now func() time.Time
}

func (c *PayoutCollectorConfig) setDefaults() {
	cfgerr.Default(&c.Window, DefaultPayoutWindow)
	cfgerr.Default(&c.QueryTimeout, DefaultQueryTimeout)
	cfgerr.Default(&c.Logger, slog.Default())
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate names the problems by field: "app_code", "window",
// "query_timeout".
func (c PayoutCollectorConfig) Validate() error {
	c.setDefaults()
	var v cfgerr.Checks
	v.Set("app_code", c.AppCode)
	if len(c.AppCode) > mysqlsink.MaxAppCode {
		v.Bad("app_code", "must be at most %d bytes (got %d)", mysqlsink.MaxAppCode, len(c.AppCode))
	}
	if c.Window < time.Hour || c.Window%time.Hour != 0 {
		v.Bad("window", "must be a whole number of hours, at least 1h (got %s)", c.Window)
	}
	v.PositiveDuration("query_timeout", c.QueryTimeout)
	return v.Err()
}

// PayoutCollector is a prometheus.Collector of the payout facts of the
// last Window per gift and rule version, read from
// lucky_payout_stats_hourly on every scrape (one indexed query):
//
//   - roomflow_lucky_draws: draws in the window;
//   - roomflow_lucky_payout_rate_ppm: coins_out / coins_in in ppm (absent
//     while coins_in is 0);
//   - roomflow_lucky_target_payout_rate_ppm: the rule version's target;
//   - roomflow_lucky_payout_stats_query_errors_total: scrapes whose query
//     failed (they then expose no gauges, so a failing database never
//     fails the whole /metrics page and never fires the payout alert).
//
// Every series has the labels app_code, gift_id and rule_version (the
// counter app_code only). It is safe for concurrent scrapes.
type PayoutCollector struct {
	cfg    PayoutCollectorConfig
	db     *sql.DB
	draws  *prometheus.Desc
	rate   *prometheus.Desc
	target *prometheus.Desc
	errs   prometheus.Counter
}

// NewPayoutCollector returns the collector of cfg.AppCode's payout facts
// in db; register it on the service's registry. It fails on a config
// that does not validate.
func NewPayoutCollector(cfg PayoutCollectorConfig, db *sql.DB) (*PayoutCollector, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	app := prometheus.Labels{"app_code": cfg.AppCode}
	labels := []string{"gift_id", "rule_version"}
	win := fmt.Sprintf(" over the last %s (lucky_payout_stats_hourly)", cfg.Window)
	return &PayoutCollector{
		cfg:    cfg,
		db:     db,
		draws:  prometheus.NewDesc("roomflow_lucky_draws", "Lucky draws per gift and rule version"+win+".", labels, app),
		rate:   prometheus.NewDesc("roomflow_lucky_payout_rate_ppm", "Reward coins paid per coin spent on lucky draws, in ppm, per gift and rule version"+win+".", labels, app),
		target: prometheus.NewDesc("roomflow_lucky_target_payout_rate_ppm", "The rule version's target payout rate in ppm (lucky_gift_rules.target_payout_rate_ppm as the draws carried it).", labels, app),
		errs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomflow_lucky_payout_stats_query_errors_total", ConstLabels: app,
			Help: "Scrapes of the lucky payout gauges whose lucky_payout_stats_hourly query failed.",
		}),
	}, nil
}

// Describe sends the descriptors of the collector's metrics.
func (c *PayoutCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.draws
	ch <- c.rate
	ch <- c.target
	ch <- c.errs.Desc()
}

// Collect queries the window and sends one sample per gift and rule
// version per gauge.
func (c *PayoutCollector) Collect(ch chan<- prometheus.Metric) {
	defer func() { ch <- c.errs }()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.QueryTimeout)
	defer cancel()
	stats, err := c.Query(ctx)
	if err != nil {
		c.errs.Inc()
		c.cfg.Logger.Warn("lucky payout stats query failed", "component", "lucky_payout_collector", "app_code", c.cfg.AppCode, "err", err)
		return
	}
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(c.draws, prometheus.GaugeValue, float64(s.Draws), s.GiftID, s.RuleVersion)
		ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(s.TargetPayoutRatePPM), s.GiftID, s.RuleVersion)
		if rate, ok := s.PayoutRatePPM(); ok {
			ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, rate, s.GiftID, s.RuleVersion)
		}
	}
}

// PayoutStats are one gift and rule version's facts summed over a window.
type PayoutStats struct {
	GiftID, RuleVersion string
	Draws, Hits         int64
	CoinsIn, CoinsOut   int64
	TargetPayoutRatePPM int64
}

// PayoutRatePPM is CoinsOut per CoinsIn in ppm; false while CoinsIn is 0.
func (s PayoutStats) PayoutRatePPM() (float64, bool) {
	if s.CoinsIn <= 0 {
		return 0, false
	}
	return float64(s.CoinsOut) / float64(s.CoinsIn) * 1e6, true
}

// Query sums the window's hourly facts per gift and rule version, ordered
// by gift and version.
func (c *PayoutCollector) Query(ctx context.Context) ([]PayoutStats, error) {
	now := c.cfg.Now().UnixMilli()
	from := now - now%HourMs - (c.cfg.Window.Milliseconds() - HourMs)
	rows, err := c.db.QueryContext(ctx, "SELECT gift_id, rule_version, SUM(draws), SUM(hits), SUM(coins_in), SUM(coins_out), MAX(target_payout_rate_ppm) "+
		"FROM lucky_payout_stats_hourly WHERE app_code = ? AND hour_start_ms >= ? GROUP BY gift_id, rule_version ORDER BY gift_id, rule_version", c.cfg.AppCode, from)
	if err != nil {
		return nil, fmt.Errorf("query lucky_payout_stats_hourly: %w", err)
	}
	var out []PayoutStats
	for rows.Next() {
		var s PayoutStats
		if err := rows.Scan(&s.GiftID, &s.RuleVersion, &s.Draws, &s.Hits, &s.CoinsIn, &s.CoinsOut, &s.TargetPayoutRatePPM); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan lucky_payout_stats_hourly: %w", err)
		}
		out = append(out, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("query lucky_payout_stats_hourly: %w", err)
	}
	return out, nil
}
