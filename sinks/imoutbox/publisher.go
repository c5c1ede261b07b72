package imoutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Publisher is `roomflow publish-im`: the Kafka fast path, the compensation
// worker (with its fallback for when Kafka is unreachable, see
// scanFallback) and the backlog gauges. Config.DisableDelivery
// (outbox_worker.enabled=false) switches delivery off as a whole (neither
// path runs; only the gauges do), so a disabled worker never leaves
// retryable rows behind a fast path that keeps sending.
type Publisher struct {
	Service  *Service
	Client   *tencentim.Client // nil when disabled
	fast     *FastPath         // nil when disabled
	fallback *scanFallback     // nil when disabled
	scan     bool
	log      *slog.Logger
	interval time.Duration
}

// Consumes reports whether the IM publisher's fast path needs eventType on
// kafka.topics.room_events: every type that is not a no-op
// (tencentim.IsNoOp), unknown ones included (they are sent with their raw
// payload). cmd/roomflow refuses a relay.routes entry that would send such a
// type elsewhere, where only the compensation scan would find it, late.
func Consumes(eventType string) bool { return !tencentim.IsNoOp(eventType) }

// NewPublisher builds the publisher on db from cfg (defaults filled, see
// Config), its logs under component=publish-im. It fails when cfg does not
// validate (keyed as Config.Validate; with delivery on, the IM client's
// defaults are filled before its fields are checked) or the Kafka client
// cannot be created.
func NewPublisher(cfg Config, db *sql.DB) (*Publisher, error) {
	cfg.setDefaults()
	if cfg.PoolConns == 0 && db != nil {
		cfg.PoolConns = db.Stats().MaxOpenConnections
	}
	log := cfg.Logger.With("component", "publish-im")
	err := cfg.validateOwn()
	enabled := !cfg.DisableDelivery
	var client *tencentim.Client
	if enabled {
		im := cfg.IM
		if im.Registerer == nil {
			im.Registerer = cfg.Registerer
		}
		if im.Logger == nil {
			im.Logger = log
		}
		var imErr error
		if client, imErr = tencentim.New(im); imErr != nil {
			err = errors.Join(err, cfgerr.Under("im", nil, imErr))
		}
	}
	if err != nil {
		return nil, err
	}
	p := &Publisher{scan: enabled, log: log, interval: max(cfg.PollInterval, 5*time.Second)}
	var sender Sender
	if enabled {
		p.Client, sender = client, client
	}
	svcCfg := cfg.ServiceConfig
	svcCfg.Logger = log
	svc, err := NewService(svcCfg, NewRepo(db), sender)
	if err != nil {
		return nil, err
	}
	p.Service = svc
	if enabled {
		svc.m.enabled.Set(1)
		// This replica's part of im.max_calls_per_second follows the
		// partitions its fast path owns (nothing before the first
		// assignment); the scan takes only their rooms.
		window := cfg.IM.PacingWindow
		if window <= 0 {
			window = tencentim.DefaultPacingWindow
		}
		svc.share = newShare(client.MaxCallsPerSecond(), window, client.SetCallRate)
		if p.fast, err = newFastPath(svc, cfg, client.MaxCallsPerSecond(), svc.share); err != nil {
			return nil, fmt.Errorf("publish-im: kafka: %w", err)
		}
		if !cfg.DisableScanFallback {
			cfgerr.Default(&cfg.ScanFallbackAfter, DefaultScanFallbackAfter)
			cfgerr.Default(&cfg.ScanFallbackRetry, DefaultScanFallbackRetry)
			p.fallback = newScanFallback(db, svc.share, cfg.ScanFallbackAfter, cfg.ScanFallbackRetry, cfg.IM.SDKAppID,
				svc.m.fallback, log)
		}
	}
	return p, nil
}

// Run runs until ctx ends, then stops consuming and claiming, waits for
// in-flight sends (publish_timeout) and their results, and closes Kafka,
// all within shutdown.timeout (sends still in flight then are cancelled,
// their rows left delivering). Every goroutine has ended when it returns:
// the caller closes MySQL afterwards.
func (p *Publisher) Run(ctx context.Context) error {
	// A dead fast path stops the whole component: the group cancels the
	// others at its error.
	g, ctx := errgroup.WithContext(ctx)
	loop := func(fn func(context.Context)) { g.Go(func() error { fn(ctx); return nil }) }
	loop(func(ctx context.Context) { p.Service.RunGauges(ctx, p.interval) })
	if p.fast == nil {
		p.log.Warn("outbox_worker.enabled is false: publish-im delivers nothing to Tencent IM (no fast path, no compensation scan); room_outbox rows stay pending until it is enabled",
			"metric", "roomflow_im_delivery_enabled")
		return g.Wait()
	}
	g.Go(func() error { return p.fast.Run(ctx) })
	if p.scan {
		loop(p.Service.RunOutboxWorker)
		if p.fallback != nil {
			loop(p.fallback.Run)
		}
	}
	loop(p.Service.RunLockRenewer)
	// The last summary comes after every send has ended, so it counts the
	// failures of sends still in flight at cancel too.
	sumCtx, stopSummaries := context.WithCancel(context.WithoutCancel(ctx))
	summaries := make(chan struct{})
	go func() { p.Service.fails.run(sumCtx, p.Service.cfg.FailureSummaryInterval); close(summaries) }()
	err := g.Wait()
	stopSummaries()
	<-summaries
	return err
}
