// Package wallet is roomflow's client of the wallet team's
// hyapp.wallet.v1.WalletService (LUCKY-1: the idempotent credit RPC the
// wallet team adds): CreditLuckyReward pays a lucky reward into a
// user's coin balance.
//
// The wallet deduplicates by reward_id: a repeated credit of the same
// reward returns the first call's credit_receipt_id and pays nothing again.
// So a caller that did not hear the answer (a timeout, a lost response)
// simply calls again with the same request; that is what the lucky_outbox
// worker (services/luckydraw/luckyoutbox) does.
//
// The connection is gRPC to lucky.wallet_grpc_addr, over TLS with a client
// certificate when Config.TLS is set (lucky.wallet_tls), else plaintext,
// made lazily:
// New never blocks and never fails because the wallet is down; a call to a
// wallet that cannot be reached fails with codes.Unavailable (and is
// retried by the outbox). Every call is bounded by Config.Timeout or the
// caller's earlier deadline.
package wallet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/schemas/walletv1"
)

// DefaultTimeout is lucky.wallet_credit_timeout's default.
const DefaultTimeout = 500 * time.Millisecond

// Config configures a Client. Zero values are the defaults; Addr is
// required.
type Config struct {
	// Addr is the wallet's host:port (lucky.wallet_grpc_addr).
	Addr string
	// TLS dials the wallet over TLS with it (lucky.wallet_tls, loaded by
	// internal/tlsx: the CA, the client certificate re-read when its
	// files change, the server name); nil dials plaintext.
	TLS *tls.Config
	// Timeout bounds one CreditLuckyReward call (lucky.wallet_credit_timeout);
	// a caller's earlier deadline wins. Default DefaultTimeout (500ms).
	Timeout time.Duration
	// DialOptions are added after the client's own (tests, interceptors).
	DialOptions []grpc.DialOption
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.Timeout, DefaultTimeout)
}

// Validate reports every invalid field, keyed by its snake-case name.
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Set("addr", c.Addr)
	// host:port, or a gRPC target URI (dns:///wallet:13004, unix:...):
	// a bare host would silently dial port 443.
	if c.Addr != "" && !strings.Contains(c.Addr, ":///") && !strings.HasPrefix(c.Addr, "unix:") {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			ch.Bad("addr", "must be host:port or a gRPC target URI (got %q)", c.Addr)
		}
	}
	ch.PositiveDuration("timeout", c.Timeout)
	return ch.Err()
}

// ErrInvalidRequest is wrapped by the error of a request that is refused
// before any call: no reward_id, no user, or no coins to credit.
var ErrInvalidRequest = errors.New("wallet: invalid credit request")

// ErrNoReceipt is wrapped by the error of a successful answer that carries
// no credit_receipt_id: the credit's outcome is unknown, so it is retried
// like a failure.
var ErrNoReceipt = errors.New("wallet: answer without credit_receipt_id")

// CreditError is a failed CreditLuckyReward call. Code is the gRPC status
// code (codes.DeadlineExceeded on a timeout, codes.Unavailable when the
// wallet cannot be reached, codes.Unknown for ErrNoReceipt). Whether the
// wallet applied the credit is unknown: retry with the same request.
type CreditError struct {
	RewardID string
	Code     codes.Code
	Err      error
}

func (e *CreditError) Error() string {
	return fmt.Sprintf("wallet: credit reward %s: %s: %v", e.RewardID, e.Code, e.Err)
}

func (e *CreditError) Unwrap() error { return e.Err }

// Timeout reports whether the call ran out of time (its deadline, or the
// caller's).
func (e *CreditError) Timeout() bool { return e.Code == codes.DeadlineExceeded }

// Client calls WalletService. It is safe for concurrent use.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
	api  walletv1.WalletServiceClient
}

// New returns a client of cfg.Addr; it fails only on an invalid Config or
// an address gRPC cannot parse, never because the wallet is down.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("wallet: client for %s: %w", cfg.Addr, err)
	}
	return &Client{cfg: cfg, conn: conn, api: walletv1.NewWalletServiceClient(conn)}, nil
}

// Credit credits req.RewardCoins to req.UserId under the idempotency key
// req.RewardId, bounded by Config.Timeout, and returns the wallet's answer
// (credit_receipt_id always set). It fails with an error wrapping
// ErrInvalidRequest before any call when req has no reward_id, a user_id
// <= 0 or reward_coins <= 0, and with a *CreditError when the call fails
// or the answer has no receipt.
func (c *Client) Credit(ctx context.Context, req *walletv1.CreditLuckyRewardRequest) (*walletv1.CreditLuckyRewardResponse, error) {
	if req.GetRewardId() == "" || req.GetUserId() <= 0 || req.GetRewardCoins() <= 0 {
		return nil, fmt.Errorf("%w: reward_id %q, user_id %d, reward_coins %d", ErrInvalidRequest, req.GetRewardId(), req.GetUserId(), req.GetRewardCoins())
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.api.CreditLuckyReward(ctx, req)
	if err != nil {
		code := status.Code(err)
		if ctx.Err() != nil && code != codes.DeadlineExceeded && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = codes.DeadlineExceeded
		}
		return nil, &CreditError{RewardID: req.GetRewardId(), Code: code, Err: err}
	}
	if resp.GetCreditReceiptId() == "" {
		return nil, &CreditError{RewardID: req.GetRewardId(), Code: codes.Unknown, Err: ErrNoReceipt}
	}
	return resp, nil
}

// Close closes the connection; calls in flight fail with
// codes.Canceled.
func (c *Client) Close() error { return c.conn.Close() }
