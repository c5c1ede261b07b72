package imoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/sinks/tencentim"
)

// Publisher is `roomflow publish-im`: the Kafka fast path, the compensation
// worker (when outbox_worker.enabled) and the backlog gauges.
type Publisher struct {
	Service  *Service
	Client   *tencentim.Client
	fast     *FastPath
	enabled  bool
	interval time.Duration
}

// OptionsFrom maps the config blocks to Options.
func OptionsFrom(cfg *config.Config) Options {
	ow := cfg.OutboxWorker
	return Options{
		NodeID: ow.NodeID, GroupIDPrefix: cfg.IM.GroupIDPrefix, PollInterval: ow.PollInterval.D(),
		BatchSize: ow.BatchSize, PublishTimeout: ow.PublishTimeout.D(), RetryStrategy: ow.RetryStrategy,
		ClaimGrace: ow.ClaimGrace.D(), LockTTL: ow.LockTTL.D(), MarkPermanentFailed: cfg.IM.MarkPermanentFailed,
		DrainTimeout: cfg.Shutdown.Timeout.D(),
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
// component=publish-im. It fails when the IM credentials are missing
// (config.ValidateIM), the retry strategy is unknown, or the Kafka client
// cannot be created.
func NewPublisher(cfg *config.Config, db *sql.DB, reg prometheus.Registerer, log *slog.Logger, opts ...PublisherOpt) (*Publisher, error) {
	var po publisherOpts
	for _, o := range opts {
		o(&po)
	}
	if err := cfg.ValidateIM(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	klog := log // kafkax tags the Kafka client's lines with component=publish-im itself
	log = log.With("component", "publish-im")
	client, err := tencentim.New(cfg.IM, append([]tencentim.Opt{tencentim.WithRegisterer(reg), tencentim.WithLogger(log)}, po.im...)...)
	if err != nil {
		return nil, err
	}
	svc, err := NewService(NewRepo(db), client, OptionsFrom(cfg), reg, log)
	if err != nil {
		return nil, err
	}
	var kopts []kgo.Opt
	if po.instanceID != "" {
		kopts = append(kopts, kgo.InstanceID(po.instanceID))
	}
	fast, err := NewFastPath(svc, cfg.Kafka, cfg.OutboxWorker.Group, reg, klog, cfg.IM.MaxCallsPerSecond, kopts...)
	if err != nil {
		return nil, fmt.Errorf("publish-im: kafka: %w", err)
	}
	return &Publisher{Service: svc, Client: client, fast: fast, enabled: cfg.OutboxWorker.Enabled,
		interval: max(cfg.OutboxWorker.PollInterval.D(), 5*time.Second)}, nil
}

// Run runs until ctx ends, then stops consuming and claiming, waits for
// in-flight sends (publish_timeout) and their results, and closes Kafka.
// The caller closes MySQL afterwards.
func (p *Publisher) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var ferr error
	wg.Go(func() {
		if ferr = p.fast.Run(ctx); ferr != nil {
			cancel() // a dead fast path stops the whole component
		}
	})
	if p.enabled {
		wg.Go(func() { p.Service.RunOutboxWorker(ctx) })
	}
	wg.Go(func() { p.Service.RunGauges(ctx, p.interval) })
	wg.Go(func() { p.Service.RunLockRenewer(ctx) })
	wg.Wait()
	return ferr
}
