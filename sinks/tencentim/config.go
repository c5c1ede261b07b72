package tencentim

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// Defaults of Config, equal to roomflow's im.* defaults.
const (
	DefaultEndpoint                     = "https://adminapisgp.im.qcloud.com"
	DefaultAdminIdentifier              = "administrator"
	DefaultUserSigTTL                   = 24 * time.Hour
	DefaultMaxCallsPerSecond            = 200
	DefaultMaxMessagesPerGroupPerSecond = 40
	DefaultMaxMessageBytes              = MaxMessageBytesLimit
	// DefaultPacingWindow is 1s plus a guard against clock skew with
	// Tencent.
	DefaultPacingWindow = time.Second + 10*time.Millisecond
)

// MaxMessageBytesLimit is Tencent's documented limit of one message (12 KB,
// "Use Limits", not a setting of the app): it refuses a larger MsgBody with
// 80002, so a MaxMessageBytes above it only spends calls on refusals.
const MaxMessageBytesLimit = 12 * 1024

// MaxGroupIDBytes is Tencent's limit of a custom group id, which must also
// be printable ASCII (0x20-0x7e): no group has a longer one.
const MaxGroupIDBytes = 48

// Config configures a Client. New fills the defaults of zero fields, then
// validates; Validate checks the fields as they are and names them in
// snake case ("sdk_app_id"). Neither ever returns a secret.
type Config struct {
	// Endpoint is the base URL of the Tencent IM REST API, http(s) with a
	// host. Default DefaultEndpoint (Singapore).
	Endpoint string
	// SDKAppID is the IM application's SDKAppID, a uint32. Required.
	SDKAppID int64
	// AdminIdentifier is the app administrator the calls are made as (and
	// the UserSig is signed for). Default DefaultAdminIdentifier.
	AdminIdentifier string
	// SecretKey signs the UserSig. Required; a secret: never logged nor
	// part of an error.
	SecretKey string
	// UserSigTTL is the lifetime of a generated UserSig, at least 10m (it
	// is renewed when a quarter of it is left). Default DefaultUserSigTTL
	// (24h).
	UserSigTTL time.Duration
	// MaxCallsPerSecond is the calls per second this client may make:
	// roomflow's share of Tencent's per-app limit, which room-service's
	// own synchronous sends use too. A client paces at it until
	// SetCallRate changes it (imoutbox's Publisher sets each replica's
	// part of it). Default DefaultMaxCallsPerSecond (200).
	MaxCallsPerSecond int
	// MaxMessagesPerGroupPerSecond paces each group under Tencent's
	// per-group limit. Default DefaultMaxMessagesPerGroupPerSecond (40).
	MaxMessagesPerGroupPerSecond int
	// MaxMessageBytes refuses larger messages before any call; at most
	// MaxMessageBytesLimit, Tencent's own. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// HTTPClient makes the calls. Default: a pooled keep-alive client that
	// follows no redirect (a 3xx is an *HTTPError).
	HTTPClient *http.Client
	// Registerer gets the client's roomflow_im_* metrics. Default nil: not
	// registered.
	Registerer prometheus.Registerer
	// Logger gets the client's lines, with no component field added, so a
	// caller passing its component's logger gets them under that one
	// component. Default slog.Default() with component=tencentim.
	Logger *slog.Logger
	// Now is the clock of UserSig lifetimes (tests). Default time.Now.
	Now func() time.Time
	// PacingWindow is the window the rate limits count in. Default
	// DefaultPacingWindow.
	PacingWindow time.Duration
}

// setDefaults fills the zero fields that have a default.
func (c *Config) setDefaults() {
	cfgerr.Default(&c.Endpoint, DefaultEndpoint)
	cfgerr.Default(&c.AdminIdentifier, DefaultAdminIdentifier)
	cfgerr.Default(&c.UserSigTTL, DefaultUserSigTTL)
	cfgerr.Default(&c.MaxCallsPerSecond, DefaultMaxCallsPerSecond)
	cfgerr.Default(&c.MaxMessagesPerGroupPerSecond, DefaultMaxMessagesPerGroupPerSecond)
	cfgerr.Default(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	if c.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 256
		tr.MaxIdleConnsPerHost = 128
		tr.IdleConnTimeout = 90 * time.Second
		c.HTTPClient = &http.Client{Transport: tr,
			// Tencent never redirects send_group_msg; following one would
			// hand the usersig to the new host in the Referer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.Logger == nil {
		c.Logger = slog.Default().With("component", "tencentim")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	cfgerr.Default(&c.PacingWindow, DefaultPacingWindow)
}

// Validate reports every invalid field, keyed by its snake-case name; the
// secret key is only ever reported as missing.
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ch.Bad("endpoint", "must be an http(s) base URL (got %q)", c.Endpoint)
	}
	switch {
	case c.SDKAppID == 0:
		ch.Bad("sdk_app_id", "must be set to call Tencent IM")
	case c.SDKAppID < 0 || c.SDKAppID > 1<<32-1:
		ch.Bad("sdk_app_id", "must be a uint32 (got %d)", c.SDKAppID)
	}
	ch.Set("admin_identifier", c.AdminIdentifier)
	if c.SecretKey == "" {
		ch.Bad("secret_key", "must be set to call Tencent IM")
	}
	ch.PositiveDuration("usersig_ttl", c.UserSigTTL)
	if c.UserSigTTL > 0 && c.UserSigTTL < 10*time.Minute {
		ch.Bad("usersig_ttl", "must be at least 10m so a sig can be renewed before it expires (got %s)", c.UserSigTTL)
	}
	ch.Positive("max_calls_per_second", c.MaxCallsPerSecond)
	ch.Positive("max_messages_per_group_per_second", c.MaxMessagesPerGroupPerSecond)
	ch.Positive("max_message_bytes", c.MaxMessageBytes)
	if c.MaxMessageBytes > MaxMessageBytesLimit {
		ch.Bad("max_message_bytes", "must be at most %d, Tencent's limit of a message, which it refuses larger with 80002 (got %d)",
			MaxMessageBytesLimit, c.MaxMessageBytes)
	}
	if c.PacingWindow < 0 {
		ch.Bad("pacing_window", "must be a positive duration, or 0 for the default (got %s)", c.PacingWindow)
	}
	return ch.Err()
}
