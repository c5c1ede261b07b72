package imoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Publisher is `roomflow publish-im`: the Kafka fast path, the compensation
// worker and the backlog gauges. outbox_worker.enabled=false switches
// delivery off as a whole (neither path runs; only the gauges do), so a
// disabled worker never leaves retryable rows behind a fast path that
// keeps sending.
type Publisher struct {
	Service  *Service
	Client   *tencentim.Client // nil when disabled
	fast     *FastPath         // nil when disabled
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

// OptionsFrom maps the config blocks to Options.
func OptionsFrom(cfg *config.Config) Options {
	ow := cfg.OutboxWorker
	return Options{
		NodeID: ow.NodeID, GroupIDPrefix: cfg.IM.GroupIDPrefix, PollInterval: ow.PollInterval.D(),
		BatchSize: ow.BatchSize, PublishTimeout: ow.PublishTimeout.D(), RetryStrategy: ow.RetryStrategy,
		ClaimGrace: ow.ClaimGrace.D(), LockTTL: ow.LockTTL.D(), MarkPermanentFailed: cfg.IM.MarkPermanentFailed,
		DrainTimeout: cfg.Shutdown.Timeout.D(), AppCode: cfg.AppCode,
	}
}

// PublisherOpt configures NewPublisher.
type PublisherOpt func(*publisherOpts)

type publisherOpts struct {
	im         []tencentim.Opt
	instanceID string
}

// WithIMOpts passes options to the Tencent IM client (benchmarks: an HTTP
// transport of their own).
func WithIMOpts(opts ...tencentim.Opt) PublisherOpt {
	return func(o *publisherOpts) { o.im = append(o.im, opts...) }
}

// WithInstanceID makes the fast path's consumer a static member of
// outbox_worker.group (group.instance.id): restarted with the same id, it
// takes its partitions straight back instead of waiting for its
// predecessor's session timeout. Unique per running replica and stable
// across its restarts (the pod name); empty keeps a dynamic member.
func WithInstanceID(id string) PublisherOpt {
	return func(o *publisherOpts) { o.instanceID = id }
}

// NewPublisher builds the publisher from cfg, its metrics on reg (nil: not
// registered), its logs on log (nil: slog.Default()) under
// component=publish-im. It fails when the retry strategy is unknown, or,
// with delivery enabled, when the IM credentials are missing
// (config.ValidateIM) or the Kafka client cannot be created.
func NewPublisher(cfg *config.Config, db *sql.DB, reg prometheus.Registerer, log *slog.Logger, opts ...PublisherOpt) (*Publisher, error) {
	var po publisherOpts
	for _, o := range opts {
		o(&po)
	}
	enabled := cfg.OutboxWorker.Enabled
	if enabled {
		if err := cfg.ValidateIM(); err != nil {
			return nil, err
		}
	}
	if log == nil {
		log = slog.Default()
	}
	klog := log // kafkax tags the Kafka client's lines with component=publish-im itself
	log = log.With("component", "publish-im")
	p := &Publisher{scan: enabled, log: log, interval: max(cfg.OutboxWorker.PollInterval.D(), 5*time.Second)}
	var sender Sender
	if enabled {
		client, err := tencentim.New(cfg.IM, append([]tencentim.Opt{tencentim.WithRegisterer(reg), tencentim.WithLogger(log)}, po.im...)...)
		if err != nil {
			return nil, err
		}
		p.Client, sender = client, client
	}
	svc, err := NewService(NewRepo(db), sender, OptionsFrom(cfg), reg, log)
	if err != nil {
		return nil, err
	}
	p.Service = svc
	if enabled {
		svc.m.enabled.Set(1)
		var kopts []kgo.Opt
		if po.instanceID != "" {
			kopts = append(kopts, kgo.InstanceID(po.instanceID))
		}
		if p.fast, err = NewFastPath(svc, cfg.Kafka, cfg.OutboxWorker.Group, reg, klog, cfg.IM.MaxCallsPerSecond, cfg.IM.FastPathDelay.D(), kopts...); err != nil {
			return nil, fmt.Errorf("publish-im: kafka: %w", err)
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
	}
	loop(p.Service.RunLockRenewer)
	// The last summary comes after every send has ended, so it counts the
	// failures of sends still in flight at cancel too.
	sumCtx, stopSummaries := context.WithCancel(context.WithoutCancel(ctx))
	summaries := make(chan struct{})
	go func() { p.Service.fails.run(sumCtx, p.Service.opt.FailureSummaryInterval); close(summaries) }()
	err := g.Wait()
	stopSummaries()
	<-summaries
	return err
}
