// Package app is the frame every roomflow component runs in: process-wide
// dependencies (config, logger, metrics registry, health, one MySQL pool),
// a registry of components, and the ordered start/stop that the design asks
// of every long-running command.
//
// Shutdown order (docs/requirements.md IM-9): the process is marked draining (/readyz
// answers 503 at once); then the context given to Component.Run is
// cancelled (stop intake); each component drains its in-flight batch within
// shutdown.timeout and closes its own Kafka clients before Run returns; the
// frame waits for every component and only then closes the shared MySQL
// pool and stops the HTTP server. A component that accepts inbound calls
// (Deps.Serving) is cancelled shutdown.drain_delay later than the others,
// its listeners serving meanwhile while Kubernetes takes the not-ready pod
// out of its Services' endpoints. A component still running 5s after
// shutdown.timeout (and the drain delay) is a bug: the frame then returns an error naming it and
// leaves MySQL open (the process exits under it, as on SIGKILL), so no
// component ever runs without its database.
package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/mysqlx"
	"github.com/hyapp/roomflow/internal/obs"
)

// Component is one long-running part of roomflow (relay, processor, sink,
// IM publisher).
//
// Run blocks until ctx is cancelled or the component fails. On cancel it
// must stop fetching/claiming, finish or abort its in-flight batch within
// Deps.Config.Shutdown.Timeout, close the Kafka clients it created, and
// return nil. A non-nil error stops the whole process.
type Component interface {
	Run(ctx context.Context) error
}

// ComponentFunc adapts a function to Component.
type ComponentFunc func(ctx context.Context) error

// Run calls f.
func (f ComponentFunc) Run(ctx context.Context) error { return f(ctx) }

// Spec describes a component and its subcommand. The command package lists
// the specs explicitly, in start order.
type Spec struct {
	Name  string // subcommand name, e.g. "relay"
	Short string // one line for --help
	Long  string // the command's help text
	// Flags defines command-specific flags on fs. New reads their values
	// from Deps.Flags, never from variables captured here: every command
	// tree (tests and the demo build many in one binary) parses into a flag
	// set of its own, so one command's flags cannot leak into the next.
	Flags func(fs *pflag.FlagSet)
	// Check validates the component's keys and flags without connecting
	// to anything (nil: New does all its checking). Run checks every spec
	// before it builds the first, so `roomflow run` refuses a later
	// component's config mistake (exit 2) before an earlier one dials MySQL.
	Check func(d *Deps) error
	// New builds the component. It may fail on invalid config or an
	// unreachable dependency; the process then exits before running anything.
	New func(ctx context.Context, d *Deps) (Component, error)
}

// AddFlags defines the flags of every spec on fs, the first definition of
// a name winning (components share --instance-id): `roomflow run` accepts
// what each component's own command accepts.
func AddFlags(fs *pflag.FlagSet, specs []Spec) {
	for _, s := range specs {
		if s.Flags == nil {
			continue
		}
		own := pflag.NewFlagSet(s.Name, pflag.ContinueOnError)
		s.Flags(own)
		fs.AddFlagSet(own) // skips names fs already has
	}
}

// Deps are the process-wide resources. Components must not close them.
type Deps struct {
	Config   *config.Config
	Log      *slog.Logger
	Registry *prometheus.Registry
	Health   *obs.Health
	// Flags are the parsed flags of the command being run. NewDeps fills
	// them with every registered component's defaults (the demo runs
	// components without a command line); a command replaces them with its
	// own.
	Flags *pflag.FlagSet

	dbOnce sync.Once
	db     *sql.DB
	dbErr  error
	// serving: a component was wrapped by Serving, so the stop may take
	// shutdown.drain_delay longer.
	serving atomic.Bool
}

// Serving wraps c, a component that accepts inbound calls (a gRPC or HTTP
// listener): on a stop its context ends shutdown.drain_delay after the
// others', so calls still routed to the pod in the seconds Kubernetes takes
// to drop it from its Services' endpoints are served, not refused.
func (d *Deps) Serving(c Component) Component {
	delay := d.Config.Shutdown.DrainDelay.D()
	if delay <= 0 {
		return c
	}
	d.serving.Store(true)
	return ComponentFunc(func(ctx context.Context) error {
		late, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		defer cancel(nil)
		go func() {
			select {
			case <-ctx.Done():
			case <-late.Done():
				return // c returned on its own
			}
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
				cancel(context.Cause(ctx))
			case <-late.Done():
			}
		}()
		return c.Run(late)
	})
}

// NewDeps returns Deps for cfg with a fresh registry and health, and the
// flags of specs at their defaults (a command replaces Flags with its own).
func NewDeps(cfg *config.Config, log *slog.Logger, specs ...Spec) *Deps {
	fs := pflag.NewFlagSet("defaults", pflag.ContinueOnError)
	AddFlags(fs, specs)
	return &Deps{Config: cfg, Log: log, Registry: obs.NewRegistry(), Health: obs.NewHealth(), Flags: fs}
}

// Flag returns the value of the string flag name of the command being run,
// "" when that command has no such flag.
func (d *Deps) Flag(name string) string {
	v, err := d.Flags.GetString(name)
	if err != nil {
		return ""
	}
	return v
}

// DB opens the shared MySQL pool on first use.
func (d *Deps) DB(ctx context.Context) (*sql.DB, error) {
	d.dbOnce.Do(func() { d.db, d.dbErr = mysqlx.Open(ctx, d.Config.MySQL) })
	return d.db, d.dbErr
}

// Close releases the shared resources; the frame calls it after every
// component has returned, so MySQL is closed last.
func (d *Deps) Close() error {
	if d.db != nil {
		return d.db.Close()
	}
	return nil
}

// Run checks every component's config (Spec.Check), then builds them,
// serves metrics.addr, runs them concurrently until ctx is cancelled or
// one fails, and shuts down in order.
// It returns the first component failure, and an error naming any
// component that did not stop in time; a stop requested (ctx cancelled)
// while components are still being built returns nil.
func Run(ctx context.Context, d *Deps, run []Spec) error {
	if len(run) == 0 {
		return errors.New("app: no components to run")
	}
	if err := check(d, run); err != nil {
		return err
	}
	closeDB := true
	defer func() {
		if closeDB {
			d.Close()
		}
	}()
	var srv *obs.Server
	if addr := d.Config.Metrics.Addr; addr != "" {
		var err error
		if srv, err = obs.Serve(addr, obs.Handler(d.Registry, d.Health)); err != nil {
			return fmt.Errorf("metrics.addr %s: %w", addr, err)
		}
		d.Log.Info("serving metrics and health", "component", "app", "addr", srv.Addr())
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}

	comps, err := build(ctx, d, run)
	if comps == nil {
		return err
	}

	// Components run on their own context, cancelled only after the
	// process is marked draining; the group cancels it at the first
	// failure, with the failure as its cause.
	compCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	g, gctx := errgroup.WithContext(compCtx)
	var (
		mu      sync.Mutex
		running = map[string]bool{}
	)
	for i, c := range comps {
		running[run[i].Name] = true
		g.Go(func() error {
			err := c.Run(gctx)
			if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
				// Cancelled because the stop was requested (still starting,
				// say): a stop on request, not a failure.
				d.Log.Info("stopped while starting", "component", run[i].Name, "error", err)
				err = nil
			}
			mu.Lock()
			delete(running, run[i].Name)
			mu.Unlock()
			if err != nil {
				err = fmt.Errorf("%s: %w", run[i].Name, err)
				d.Log.Error("component failed", "component", run[i].Name, "error", err)
			}
			return err
		})
	}
	var cause, failed error
	select {
	case <-ctx.Done():
		cause = context.Cause(ctx)
	case <-gctx.Done():
		cause = context.Cause(gctx)
		failed = cause
	}
	d.Health.SetDraining()
	cancel(cause)
	bound := d.Config.Shutdown.Timeout.D() + config.StuckMargin
	if d.serving.Load() {
		bound += d.Config.Shutdown.DrainDelay.D()
		d.Log.Info("stopping; listeners serve, not ready, for shutdown.drain_delay first", "component", "app",
			"cause", cause, "drain_delay", d.Config.Shutdown.DrainDelay.String())
	} else {
		d.Log.Info("stopping", "component", "app", "cause", cause)
	}
	wait := make(chan error, 1)
	go func() { wait <- g.Wait() }()
	select {
	case err := <-wait:
		return err
	case <-time.After(bound):
		mu.Lock()
		defer mu.Unlock()
		stuck := slices.Sorted(maps.Keys(running))
		closeDB = false
		d.Log.Error("components did not stop within shutdown.timeout; exiting with MySQL still open under them", "component", "app",
			"timeout", d.Config.Shutdown.Timeout.String(), "running", stuck)
		err := fmt.Errorf("app: %s did not stop within shutdown.timeout (%s)", strings.Join(stuck, ", "), d.Config.Shutdown.Timeout)
		return errors.Join(failed, err) // failed: the failure that started the stop, if any
	}
}

// build builds every component in order, the process not ready until the
// last is built: a component without checks of its own (the draw service)
// binds its listener in New. Nil components: a build failed (its error) or
// a stop was requested while building (nil error).
func build(ctx context.Context, d *Deps, run []Spec) ([]Component, error) {
	var built atomic.Bool
	d.Health.AddReadiness("app", func() error {
		if !built.Load() {
			return errors.New("starting")
		}
		return nil
	})
	comps := make([]Component, 0, len(run))
	for _, s := range run {
		c, err := s.New(ctx, d)
		if err != nil && ctx.Err() != nil {
			// SIGTERM while starting (a rollout that replaces a pod still
			// dialling MySQL): a stop on request, not a failure. Nothing ran.
			d.Log.Info("stopped while starting", "component", s.Name, "cause", context.Cause(ctx), "error", err)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		comps = append(comps, c)
	}
	built.Store(true)
	return comps, nil
}

// check runs every spec's Check, the errors joined, each named by its
// component.
func check(d *Deps, run []Spec) error {
	var bad []error
	for _, s := range run {
		if s.Check == nil {
			continue
		}
		if err := s.Check(d); err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", s.Name, err))
		}
	}
	return errors.Join(bad...)
}

// Together runs cs as one component: until ctx ends or one fails, the
// first failure cancelling the others (an errgroup). It returns the first
// failure once every one has returned.
func Together(cs ...Component) Component {
	return ComponentFunc(func(ctx context.Context) error {
		g, ctx := errgroup.WithContext(ctx)
		for _, c := range cs {
			g.Go(func() error { return c.Run(ctx) })
		}
		return g.Wait()
	})
}
