package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyapp/roomflow/internal/app"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/testenv"
)

// On cancel every component drains while MySQL is still open; the frame
// closes MySQL only after all of them returned.
func TestRunOrderedShutdown(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, nil, m)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	var drained atomic.Int32
	started := make(chan struct{}, 2)
	spec := func(name string) app.Spec {
		return app.Spec{Name: name, New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
			db, err := d.DB(ctx)
			if err != nil {
				return nil, err
			}
			return app.ComponentFunc(func(ctx context.Context) error {
				started <- struct{}{}
				<-ctx.Done()
				time.Sleep(50 * time.Millisecond) // the in-flight batch
				if err := db.PingContext(context.Background()); err != nil {
					return errors.New("MySQL closed before the component drained")
				}
				drained.Add(1)
				return nil
			}), nil
		}}
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, []app.Spec{spec("a"), spec("b")}) }()
	<-started
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if drained.Load() != 2 {
		t.Fatalf("%d components drained, want 2", drained.Load())
	}
	db, _ := d.DB(context.Background())
	if err := db.Ping(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("MySQL must be closed after Run returns, ping: %v", err)
	}
}

// A failing component stops the others and its error is returned.
func TestRunFailureStopsAll(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var stopped atomic.Bool
	boom := errors.New("boom")
	specs := []app.Spec{
		{Name: "waits", New: func(context.Context, *app.Deps) (app.Component, error) {
			return app.ComponentFunc(func(ctx context.Context) error { <-ctx.Done(); stopped.Store(true); return nil }), nil
		}},
		{Name: "fails", New: func(context.Context, *app.Deps) (app.Component, error) {
			return app.ComponentFunc(func(context.Context) error { time.Sleep(20 * time.Millisecond); return boom }), nil
		}},
	}
	err := app.Run(context.Background(), d, specs)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "fails:") {
		t.Fatalf("want the failing component's error, got %v", err)
	}
	if !stopped.Load() {
		t.Fatal("the other component was not stopped")
	}
}

func TestRunBuildErrorNamesComponent(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := app.Run(context.Background(), d, []app.Spec{{Name: "relay", New: func(context.Context, *app.Deps) (app.Component, error) {
		return nil, errors.New("bad")
	}}})
	if err == nil || !strings.HasPrefix(err.Error(), "relay: ") {
		t.Fatalf("got %v", err)
	}
}

// Every spec's Check runs before the first New: a config mistake of the
// last component stops the process before the first one connects.
func TestRunChecksEverySpecBeforeBuilding(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var built atomic.Bool
	bad := errors.New("bad key")
	err := app.Run(context.Background(), d, []app.Spec{
		{Name: "first", New: func(context.Context, *app.Deps) (app.Component, error) {
			built.Store(true)
			return nil, errors.New("dialled")
		}},
		{Name: "last", Check: func(*app.Deps) error { return bad }},
	})
	if !errors.Is(err, bad) || !strings.HasPrefix(err.Error(), "last: ") || built.Load() {
		t.Fatalf("got %v (first built: %v), want last's check error before anything is built", err, built.Load())
	}
}

// SIGTERM while a component is still being built (dialling MySQL, waiting
// for a broker) is a stop on request: Run returns nil, so the process
// exits 0, and the components after it are never built. A build that
// fails while ctx is live is still an error (TestRunBuildErrorNamesComponent).
func TestRunStoppedWhileBuilding(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	building := make(chan struct{})
	var later atomic.Bool
	specs := []app.Spec{
		{Name: "dials", New: func(ctx context.Context, _ *app.Deps) (app.Component, error) {
			close(building)
			<-ctx.Done()
			return nil, fmt.Errorf("mysql: ping: %w", ctx.Err())
		}},
		{Name: "after", New: func(context.Context, *app.Deps) (app.Component, error) {
			later.Store(true)
			return app.ComponentFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }), nil
		}},
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, specs) }()
	<-building
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a stop while building must not be a failure: %v", err)
	}
	if later.Load() {
		t.Fatal("a component was built after the stop")
	}
}

// A component that returns context.Canceled once the stop was requested
// (it was still starting) stopped on request: Run returns nil. The same
// error before any stop is a failure.
func TestRunCancelledComponentAfterStopIsNoFailure(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	spec := app.Spec{Name: "starting", New: func(context.Context, *app.Deps) (app.Component, error) {
		return app.ComponentFunc(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return fmt.Errorf("checking topics: %w", ctx.Err())
		}), nil
	}}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, []app.Spec{spec}) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("a component cancelled by the requested stop: %v, want nil", err)
	}
	failing := app.Spec{Name: "fails", New: func(context.Context, *app.Deps) (app.Component, error) {
		return app.ComponentFunc(func(context.Context) error { return context.Canceled }), nil
	}}
	if err := app.Run(context.Background(), app.NewDeps(cfg, d.Log), []app.Spec{failing}); !errors.Is(err, context.Canceled) {
		t.Fatalf("context.Canceled without a stop must fail Run, got %v", err)
	}
}

// /readyz answers 503 while the components are still being built (a
// draw service dialling MySQL before it binds lucky.grpc_addr): a pod
// reported ready then gets traffic on a port nobody listens on yet.
func TestNotReadyWhileBuilding(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	cfg.Metrics.Addr = testenv.ClosedAddr(t)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	readyz := func() int {
		resp, err := http.Get("http://" + cfg.Metrics.Addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	release := make(chan struct{})
	building := app.Spec{Name: "building", New: func(context.Context, *app.Deps) (app.Component, error) {
		<-release
		return app.ComponentFunc(func(ctx context.Context) error { <-ctx.Done(); return nil }), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, []app.Spec{building}) }()
	testenv.Eventually(t, 10*time.Second, "/readyz to answer", func() bool { return readyz() != 0 })
	if got := readyz(); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d while a component was being built, want 503", got)
	}
	close(release)
	testenv.Eventually(t, 10*time.Second, "/readyz 200 once built", func() bool { return readyz() == http.StatusOK })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// IM-9's shutdown order: /readyz answers 503 as soon as the stop
// begins, before any component has finished draining, and MySQL is never
// closed under a component that is still running, even one that overruns
// shutdown.timeout (the frame then returns an error naming it).
func TestDrainingReadinessAndMySQLOutlivesComponents(t *testing.T) {
	m := testenv.NewMySQL(t)
	cfg := testenv.Config(t, nil, m)
	cfg.Metrics.Addr = testenv.ClosedAddr(t)
	cfg.Shutdown.Timeout = config.Duration(200 * time.Millisecond)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	readyz := func() int {
		resp, err := http.Get("http://" + cfg.Metrics.Addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	started := make(chan struct{})
	whileDraining := make(chan int, 1)
	release := make(chan struct{})
	late := make(chan error, 1)
	overruns := app.Spec{Name: "overruns", New: func(ctx context.Context, d *app.Deps) (app.Component, error) {
		db, err := d.DB(ctx)
		if err != nil {
			return nil, err
		}
		return app.ComponentFunc(func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			whileDraining <- readyz()
			<-release // a send far beyond shutdown.timeout
			late <- db.PingContext(context.Background())
			return nil
		}), nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, []app.Spec{overruns}) }()
	<-started
	testenv.Eventually(t, 10*time.Second, "/readyz to answer", func() bool { return readyz() == http.StatusOK })
	cancel()
	if got := <-whileDraining; got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answered %d while draining, want 503", got)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	if err == nil || !strings.Contains(err.Error(), "overruns did not stop") {
		t.Fatalf("Run must name the component that overran: %v", err)
	}
	close(release)
	if err := <-late; err != nil {
		t.Fatalf("MySQL closed under a running component: %v", err)
	}
}

// A Serving component (a listener) is cancelled shutdown.drain_delay after
// the stop, the process not ready meanwhile; the others (Kafka workers)
// at once: `roomflow sink` stops consuming while its stats API serves on.
func TestServingDrainDelay(t *testing.T) {
	cfg := testenv.Config(t, nil, nil)
	const delay = 300 * time.Millisecond
	cfg.Shutdown.DrainDelay = config.Duration(delay)
	d := app.NewDeps(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	var stopAt time.Time
	ended := map[string]chan time.Duration{"worker": make(chan time.Duration, 1), "listener": make(chan time.Duration, 1)}
	started := make(chan struct{}, 2)
	comp := func(name string) app.Component {
		return app.ComponentFunc(func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			if name == "listener" && d.Health.Ready() == nil {
				t.Error("ready during the drain delay, want /readyz 503")
			}
			ended[name] <- time.Since(stopAt)
			return nil
		})
	}
	specs := []app.Spec{
		{Name: "worker", New: func(context.Context, *app.Deps) (app.Component, error) { return comp("worker"), nil }},
		{Name: "listener", New: func(_ context.Context, d *app.Deps) (app.Component, error) { return d.Serving(comp("listener")), nil }},
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, d, specs) }()
	<-started
	<-started
	stopAt = time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w := <-ended["worker"]; w >= delay/2 {
		t.Errorf("the worker was cancelled %s after the stop, want at once", w)
	}
	if l := <-ended["listener"]; l < delay {
		t.Errorf("the listener was cancelled %s after the stop, want after drain_delay %s", l, delay)
	}
}
