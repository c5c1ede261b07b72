// Package walletfake is an in-process hyapp.wallet.v1.WalletService for
// tests, `roomflow demo`, benchmarks and chaos runs: it credits lucky
// rewards into per-user balances, idempotent by reward_id as the real
// wallet must be, and injects the faults the lucky_outbox exists for.
//
// Idempotency: the first successful credit of a reward_id is recorded in
// the ledger with a receipt derived from the reward_id; every later call
// with the same reward_id gets that receipt and pays nothing. A repeat
// naming another user or amount is refused with FailedPrecondition (a
// caller bug the real wallet would refuse too).
//
// Faults (Faults, settable at run time with SetFaults, drawn from a seeded
// source so a run repeats): a fixed latency plus uniform jitter before
// every answer; then, per call, exactly one of
//   - an error (Unavailable), nothing credited;
//   - a timeout: the call hangs until the caller's deadline (or the
//     server stops), nothing credited;
//   - a lost response: the credit is applied, then Unavailable is returned;
//   - success.
//
// The ledger (Ledger, credits by reward_id) and the counters (Stats) let a
// test check "every paid draw credited exactly once". The state lives in
// memory: a fake run as a child process starts empty after a restart (its
// receipts are the same, being derived from reward_id).
package walletfake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/tlsx"
	"github.com/hyapp/roomflow/schemas/walletv1"
)

// Faults are the injected faults. Rates are probabilities per call in
// [0, 1]; ErrorRate + TimeoutRate + LostRate must not exceed 1.
type Faults struct {
	// ErrorRate answers Unavailable without crediting.
	ErrorRate float64
	// TimeoutRate hangs until the caller's deadline, without crediting.
	TimeoutRate float64
	// LostRate credits, then answers Unavailable (the answer is "lost").
	LostRate float64
	// Latency delays every answer; Jitter adds a uniform [0, Jitter] on
	// top. A caller whose deadline passes first gets DeadlineExceeded and
	// nothing is credited.
	Latency time.Duration
	Jitter  time.Duration
}

// Validate reports why f cannot be injected, or nil.
func (f Faults) Validate() error {
	var errs []error
	for _, r := range []struct {
		name string
		v    float64
	}{{"error_rate", f.ErrorRate}, {"timeout_rate", f.TimeoutRate}, {"lost_rate", f.LostRate}} {
		if r.v < 0 || r.v > 1 {
			errs = append(errs, fmt.Errorf("walletfake: %s must be in [0, 1] (got %g)", r.name, r.v))
		}
	}
	if s := f.ErrorRate + f.TimeoutRate + f.LostRate; s > 1 {
		errs = append(errs, fmt.Errorf("walletfake: error_rate + timeout_rate + lost_rate must be <= 1 (got %g)", s))
	}
	if f.Latency < 0 || f.Jitter < 0 {
		errs = append(errs, fmt.Errorf("walletfake: latency and jitter must be >= 0 (got %s, %s)", f.Latency, f.Jitter))
	}
	return errors.Join(errs...)
}

// Config configures a Wallet.
type Config struct {
	// Seed seeds the fault draws; 0 draws a random seed.
	Seed uint64
	// Faults are the initial faults (zero: none).
	Faults Faults
	// TLS serves over TLS with it (internal/tlsx: a client certificate of
	// its CA required, callers admitted by name), as the real wallet
	// would behind lucky.wallet_tls; nil: plaintext.
	TLS *tlsx.Server
}

// Credit is one reward in the ledger.
type Credit struct {
	RewardID  string
	DrawID    string
	CommandID string
	RoomID    string
	UserID    int64
	Coins     int64
	ReceiptID string
	// Calls counts every call that named this reward after it was
	// credited, the crediting call included.
	Calls int
}

// Stats counts calls by outcome.
type Stats struct {
	Calls     int64 // every CreditLuckyReward received
	Credits   int64 // distinct rewards credited
	Repeats   int64 // calls answered with an existing credit's receipt
	Errors    int64 // injected errors
	Timeouts  int64 // injected hangs
	Lost      int64 // credited, answer lost
	Invalid   int64 // refused: InvalidArgument
	Conflicts int64 // refused: the reward_id was credited with other values
}

// Wallet is the fake WalletService. It is safe for concurrent use.
type Wallet struct {
	walletv1.UnimplementedWalletServiceServer
	tls *tlsx.Server

	mu       sync.Mutex
	faults   Faults
	rnd      *rand.Rand
	ledger   map[string]*Credit
	balances map[int64]int64
	stats    Stats

	// Set by Listen.
	ln     net.Listener
	cancel context.CancelFunc
	done   chan error
}

// New returns a wallet with an empty ledger; it fails when cfg.Faults is
// invalid.
func New(cfg Config) (*Wallet, error) {
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Wallet{
		tls:      cfg.TLS,
		faults:   cfg.Faults,
		rnd:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		ledger:   map[string]*Credit{},
		balances: map[int64]int64{},
	}, nil
}

// Listen starts a wallet serving on addr ("" = 127.0.0.1:0) in the
// background; Addr names the bound address, Close stops it.
func Listen(cfg Config, addr string) (*Wallet, error) {
	w, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("walletfake: listen %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.ln, w.cancel, w.done = ln, cancel, make(chan error, 1)
	go func() { w.done <- w.Serve(ctx, ln) }()
	return w, nil
}

// Addr is the address Listen bound ("" for a wallet not started by Listen).
func (w *Wallet) Addr() string {
	if w.ln == nil {
		return ""
	}
	return w.ln.Addr().String()
}

// Close stops a wallet started by Listen: calls in flight (hanging ones
// included) end with an error. It returns Serve's error.
func (w *Wallet) Close() error {
	if w.cancel == nil {
		return nil
	}
	w.cancel()
	return <-w.done
}

// Serve serves WalletService on ln until ctx ends, then stops at once
// (calls in flight end with an error) and returns nil; it returns the
// server's error if serving fails first. ln is closed either way. It is the
// entry of a fake wallet run as its own process.
func (w *Wallet) Serve(ctx context.Context, ln net.Listener) error {
	g := tlsx.NewGuard(tlsx.GuardConfig{Listener: "walletfake", Addr: "127.0.0.1:0", Server: w.tls,
		Logger: slog.New(slog.DiscardHandler)})
	srv := grpc.NewServer(g.GRPCServerOptions()...)
	walletv1.RegisterWalletServiceServer(srv, w)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("walletfake: serve: %w", err)
	case <-ctx.Done():
		srv.Stop()
		<-served
		return nil
	}
}

// SetFaults replaces the injected faults; calls already past their draw
// keep the old ones.
func (w *Wallet) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults = f
	return nil
}

// Faults returns the injected faults.
func (w *Wallet) Faults() Faults {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.faults
}

// Ledger returns a copy of the credits by reward_id.
func (w *Wallet) Ledger() map[string]Credit {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]Credit, len(w.ledger))
	for id, c := range w.ledger {
		out[id] = *c
	}
	return out
}

// Balances returns a copy of the coins credited per user.
func (w *Wallet) Balances() map[int64]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.balances)
}

// Stats returns the call counters.
func (w *Wallet) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// ReceiptID is the receipt the fake gives rewardID's credit.
func ReceiptID(rewardID string) string {
	sum := sha256.Sum256([]byte(rewardID))
	return "fw-" + hex.EncodeToString(sum[:12])
}

type outcome int

const (
	succeed outcome = iota
	fail
	hang
	lose
)

// CreditLuckyReward implements WalletService (see the package comment).
func (w *Wallet) CreditLuckyReward(ctx context.Context, req *walletv1.CreditLuckyRewardRequest) (*walletv1.CreditLuckyRewardResponse, error) {
	w.mu.Lock()
	w.stats.Calls++
	if req.GetRewardId() == "" || req.GetUserId() <= 0 || req.GetRewardCoins() <= 0 {
		w.stats.Invalid++
		w.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, "reward_id, user_id > 0 and reward_coins > 0 are required")
	}
	f := w.faults
	delay := f.Latency
	if f.Jitter > 0 {
		delay += time.Duration(w.rnd.Int64N(int64(f.Jitter) + 1))
	}
	r := w.rnd.Float64()
	out := succeed
	switch {
	case r < f.ErrorRate:
		out = fail
	case r < f.ErrorRate+f.TimeoutRate:
		out = hang
	case r < f.ErrorRate+f.TimeoutRate+f.LostRate:
		out = lose
	}
	w.mu.Unlock()

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch out {
	case fail:
		w.count(func(s *Stats) { s.Errors++ })
		return nil, status.Error(codes.Unavailable, "walletfake: injected error")
	case hang:
		w.count(func(s *Stats) { s.Timeouts++ })
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	resp, err := w.apply(req)
	if err != nil {
		return nil, err
	}
	if out == lose {
		w.count(func(s *Stats) { s.Lost++ })
		return nil, status.Error(codes.Unavailable, "walletfake: injected lost response")
	}
	return resp, nil
}

func (w *Wallet) count(f func(*Stats)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.stats)
}

// apply credits req once per reward_id.
func (w *Wallet) apply(req *walletv1.CreditLuckyRewardRequest) (*walletv1.CreditLuckyRewardResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.ledger[req.GetRewardId()]; ok {
		if c.UserID != req.GetUserId() || c.Coins != req.GetRewardCoins() {
			w.stats.Conflicts++
			return nil, status.Errorf(codes.FailedPrecondition, "reward %s was credited with user %d and %d coins", c.RewardID, c.UserID, c.Coins)
		}
		c.Calls++
		w.stats.Repeats++
		return &walletv1.CreditLuckyRewardResponse{CreditReceiptId: c.ReceiptID, BalanceAfter: w.balances[c.UserID]}, nil
	}
	c := &Credit{
		RewardID: req.GetRewardId(), DrawID: req.GetDrawId(), CommandID: req.GetCommandId(), RoomID: req.GetRoomId(),
		UserID: req.GetUserId(), Coins: req.GetRewardCoins(), ReceiptID: ReceiptID(req.GetRewardId()), Calls: 1,
	}
	w.ledger[c.RewardID] = c
	w.balances[c.UserID] += c.Coins
	w.stats.Credits++
	return &walletv1.CreditLuckyRewardResponse{CreditReceiptId: c.ReceiptID, BalanceAfter: w.balances[c.UserID]}, nil
}
