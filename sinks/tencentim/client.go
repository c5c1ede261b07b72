// Package tencentim is roomflow's Tencent Cloud IM REST client: it builds
// send_group_msg requests from room events (TIMCustomElem, Random derived
// from event_id, byte-identical on every retry), signs calls with a cached
// TLSSigAPIv2 UserSig, paces calls under the app and per-group limits,
// and classifies failures as retryable, regenerate-sig or permanent.
//
// Nothing this package returns or logs contains the UserSig or the secret
// key: the request URL (which carries the usersig) is never printed and is
// stripped from transport errors.
//
// A client is built from a Config; zero fields take their defaults (the
// Tencent limits, a 24h UserSig), only the credentials are required:
//
//	c, err := tencentim.New(tencentim.Config{
//		Endpoint:   "https://adminapisgp.im.qcloud.com",
//		SDKAppID:   1400000000,
//		SecretKey:  secret,
//		Registerer: reg,
//	})
package tencentim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/promreg"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// SendGroupMsgPath is the REST path of send_group_msg.
const SendGroupMsgPath = "/v4/group_open_http_svc/send_group_msg"

// ErrNotSent wraps a Send that ended (context done) before any request was
// made: nothing reached Tencent, the caller may hand the event back.
var ErrNotSent = errors.New("tencentim: not sent")

// Client calls Tencent IM. Safe for concurrent use.
type Client struct {
	cfg   Config // defaults filled
	base  string
	log   *slog.Logger
	pacer *Pacer
	m     *clientMetrics

	sigMu      sync.Mutex
	sig        string
	sigRenewAt time.Time
}

// New returns a client for cfg (defaults filled, see Config). It fails
// when cfg does not validate: credentials missing, a limit not positive,
// the endpoint not an http(s) URL; the error never holds the secret key.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, base: strings.TrimRight(cfg.Endpoint, "/"), log: cfg.Logger,
		pacer: NewPacer(cfg.MaxCallsPerSecond, cfg.MaxMessagesPerGroupPerSecond, cfg.PacingWindow),
		m:     newClientMetrics(cfg.Registerer)}
	c.m.budget.Set(float64(cfg.MaxCallsPerSecond))
	return c, nil
}

// MaxMessageBytes is the configured size limit.
func (c *Client) MaxMessageBytes() int { return c.cfg.MaxMessageBytes }

// MaxCallsPerSecond is the configured app call rate.
func (c *Client) MaxCallsPerSecond() int { return c.cfg.MaxCallsPerSecond }

// SetCallRate changes the calls per second this client paces at (initially
// MaxCallsPerSecond): a replica that takes its part of a rate shared with
// other replicas sets it when its part changes. A lower rate holds back at
// once, a higher one applies one pacing window later (Pacer.SetAppRate);
// 0 stops every send until it is raised.
func (c *Client) SetCallRate(rate float64) {
	c.pacer.SetAppRate(rate)
	c.m.budget.Set(max(rate, 0))
}

// userSig returns the cached sig, generating one on first use, when a
// quarter of its lifetime is left, or when force is set (70001/70052).
func (c *Client) userSig(force bool, reason string) (string, error) {
	c.sigMu.Lock()
	defer c.sigMu.Unlock()
	now := c.cfg.Now()
	if c.sig != "" && !force && now.Before(c.sigRenewAt) {
		return c.sig, nil
	}
	if c.sig == "" && reason == "" {
		reason = "initial"
	} else if !force {
		reason = "scheduled"
	}
	ttl := c.cfg.UserSigTTL
	sig, err := GenUserSig(c.cfg.SDKAppID, c.cfg.SecretKey, c.cfg.AdminIdentifier, now, ttl)
	if err != nil {
		return "", err
	}
	c.sig, c.sigRenewAt = sig, now.Add(ttl*3/4)
	c.m.sigRenewals.WithLabelValues(reason).Inc()
	c.log.Info("usersig generated", "reason", reason, "expires_at", now.Add(ttl).UTC())
	return sig, nil
}

// Result is a delivered send's answer.
type Result struct {
	MsgSeq  uint64
	MsgTime int64
}

type sendResp struct {
	ActionStatus  string `json:"ActionStatus"`
	ErrorCode     int    `json:"ErrorCode"`
	ErrorInfo     string `json:"ErrorInfo"`
	MsgTime       int64  `json:"MsgTime"`
	MsgSeq        uint64 `json:"MsgSeq"`
	MsgDropReason string `json:"MsgDropReason"`
}

// Send delivers m: size check, pacing, one call, and one immediate retry
// with a regenerated UserSig on 70001/70052. ctx bounds the whole send.
// Errors are *APIError, *HTTPError, *TransportError, *DroppedError,
// *TooLargeError, or ErrNotSent wrapping the context error when ctx ended
// while waiting for a pacing slot; see Classification.
func (c *Client) Send(ctx context.Context, m *Message) (Result, error) {
	if err := c.CheckSize(m); err != nil {
		return Result{}, err
	}
	if err := c.Pace(ctx, m.GroupID); err != nil {
		return Result{}, err
	}
	return c.Deliver(ctx, m)
}

// CheckSize refuses a message over im.max_message_bytes before any call
// (*TooLargeError, Permanent, recorded as code 80002).
func (c *Client) CheckSize(m *Message) error {
	if m.Size > c.cfg.MaxMessageBytes {
		c.m.publish.WithLabelValues(Permanent.String(), strconv.Itoa(CodeMessageTooLong)).Inc()
		return &TooLargeError{Size: m.Size, Limit: c.cfg.MaxMessageBytes}
	}
	return nil
}

// Pace waits for a pacing slot for group (app and group limits). It fails
// with ErrNotSent when ctx ends first. Callers that must stop starting new
// sends on shutdown pace on their run context and Deliver on a separate,
// timeout-bounded one.
func (c *Client) Pace(ctx context.Context, group string) error {
	waited, err := c.pacer.Wait(ctx, group)
	c.m.pacingWait.Observe(waited.Seconds())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return nil
}

// Deliver makes the call for a paced message (ctx bounds it: the
// publish_timeout), regenerating the UserSig and retrying once at once on
// 70001/70052.
func (c *Client) Deliver(ctx context.Context, m *Message) (Result, error) {
	force, reason := false, ""
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := c.Pace(ctx, m.GroupID); err != nil {
				return Result{}, err
			}
		}
		sig, err := c.userSig(force, reason)
		if err != nil {
			return Result{}, err
		}
		res, err := c.call(ctx, sig, m)
		class, code := Classification(err)
		if err == nil {
			c.m.publish.WithLabelValues("ok", "0").Inc()
			return res, nil
		}
		c.m.publish.WithLabelValues(class.String(), code).Inc()
		var ae *APIError
		if errors.As(err, &ae) {
			pause := time.Duration(0)
			switch {
			case ae.Code == CodeAccountLocked:
				pause = 60 * time.Second // Tencent locks the admin for 60 s
			case RateLimited(ae.Code):
				pause = time.Second
			}
			if pause > 0 {
				// Once per pause, not per refused call: an outage of rate
				// limits must not flood the log (the calls are counted in
				// roomflow_im_publish_total{code}).
				level := slog.LevelDebug
				if c.pacer.Pause(pause) {
					level = slog.LevelWarn
				}
				c.log.Log(ctx, level, "tencent IM asked to slow down; pausing every send", "code", ae.Code, "pause", pause.String())
			}
		}
		if class == RegenerateSig && attempt == 0 {
			force = true
			if code == strconv.Itoa(CodeSigExpired) {
				reason = "expired"
			} else {
				reason = "invalidated"
			}
			continue
		}
		return Result{}, err
	}
}

func (c *Client) call(ctx context.Context, sig string, m *Message) (Result, error) {
	q := url.Values{}
	q.Set("sdkappid", strconv.FormatInt(c.cfg.SDKAppID, 10))
	q.Set("identifier", c.cfg.AdminIdentifier)
	q.Set("usersig", sig)
	q.Set("random", strconv.FormatUint(uint64(rand.Uint32()), 10))
	q.Set("contenttype", "json")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+SendGroupMsgPath+"?"+q.Encode(), bytes.NewReader(m.Body))
	if err != nil {
		return Result{}, scrubURLError(err, sig)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		c.m.duration.Observe(time.Since(start).Seconds())
		return Result{}, scrubURLError(err, sig)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	c.m.duration.Observe(time.Since(start).Seconds())
	if resp.StatusCode != http.StatusOK {
		return Result{}, &HTTPError{Status: resp.StatusCode}
	}
	if err != nil {
		return Result{}, scrubURLError(err, sig)
	}
	var r sendResp
	if err := json.Unmarshal(raw, &r); err != nil {
		// Never echo the body: it is Tencent's, possibly large.
		return Result{}, &HTTPError{Status: resp.StatusCode}
	}
	if r.ErrorCode != 0 || r.ActionStatus != "OK" {
		code := r.ErrorCode
		if code == 0 {
			code = CodeInternal
		}
		return Result{}, &APIError{Code: code, Info: envelope.Clip(r.ErrorInfo, 120), Class: Classify(code)}
	}
	if r.MsgDropReason != "" {
		return Result{}, &DroppedError{Reason: envelope.Clip(r.MsgDropReason, 40)}
	}
	return Result{MsgSeq: r.MsgSeq, MsgTime: r.MsgTime}, nil
}

type clientMetrics struct {
	publish     *prometheus.CounterVec
	duration    prometheus.Histogram
	pacingWait  prometheus.Histogram
	sigRenewals *prometheus.CounterVec
	budget      prometheus.Gauge
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		publish: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_im_publish_total",
			Help: "send_group_msg outcomes per attempt: result ok|retryable|regenerate_sig|permanent, code = Tencent ErrorCode or http|transport|timeout|MsgFreqCtrl (oversized messages: permanent/80002 without a call).",
		}, []string{"result", "code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_im_publish_duration_seconds",
			Help:    "Duration of one send_group_msg HTTP call, pacing excluded.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		pacingWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomflow_im_pacing_wait_seconds",
			Help:    "Time a send waited for the app/group rate limit.",
			Buckets: []float64{0, .005, .025, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		sigRenewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomflow_im_usersig_renewals_total",
			Help: "UserSig generations: reason initial|scheduled|expired|invalidated.",
		}, []string{"reason"}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomflow_im_call_budget_per_second",
			Help: "send_group_msg calls per second this process paces at: its part of im.max_calls_per_second (publish-im: the share of the room events partitions its fast path owns; a raise applies one pacing window later).",
		}),
	}
	m.publish = promreg.Register(reg, m.publish)
	m.duration = promreg.Register(reg, m.duration)
	m.pacingWait = promreg.Register(reg, m.pacingWait)
	m.sigRenewals = promreg.Register(reg, m.sigRenewals)
	m.budget = promreg.Register(reg, m.budget)
	// Series at 0 before the first call, so rate() sees it; failures carry
	// Tencent's error codes, known only when they happen.
	m.publish.WithLabelValues("ok", "0")
	for _, r := range []string{"initial", "scheduled", "expired", "invalidated"} {
		m.sigRenewals.WithLabelValues(r)
	}
	return m
}

// Metrics exposes the client's counters (tests, the demo summary).
func (c *Client) Metrics() ClientMetrics { return ClientMetrics{c.m} }

// ClientMetrics reads the client's series.
type ClientMetrics struct{ m *clientMetrics }

// SigRenewals is the renewal counter for reason.
func (m ClientMetrics) SigRenewals(reason string) prometheus.Counter {
	return m.m.sigRenewals.WithLabelValues(reason)
}

// Publish is the outcome counter for result and code.
func (m ClientMetrics) Publish(result, code string) prometheus.Counter {
	return m.m.publish.WithLabelValues(result, code)
}
