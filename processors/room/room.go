// Package room is the room processor: it reads hyapp.room.events.v1 (keyed
// by room_id) exactly once through processors/streams and
//
//   - re-keys every RoomMicChanged by user_id (decimal string) and emits the
//     envelope bytes unchanged to hyapp.user.mic-events.v1, so that all of
//     one user's mic events meet in one partition of the mic processor,
//     still in room order (hence in mic-session order); an envelope without
//     app_code gets Config.AppCode appended;
//   - turns every RoomGiftSent with lucky=true into a LuckyPoolInflow
//     (LUCKY-4, integer ppm, the rule version the event names) keyed by
//     room_id on hyapp.activity.lucky-pool-inflow.v1;
//   - lets the other known room event types pass by (the IM publisher reads
//     them from the room topic directly);
//   - rejects to the DLQ, with a reason, what it cannot use: undecodable
//     envelope or payload, unknown event_type, empty or over-long event_id
//     (128), app_code (32) or room_id (64), an event_id or a lucky gift's
//     draw_id, room_id or gift_id ending in a space (padded_id: keys of
//     byte-exact columns that pad spaces, envelope.CheckID), a lucky gift
//     with negative heat or heat above envelope.MaxGiftCoins, an unknown or
//     invalid rule version, or an inflow that overflows.
//
// The processor is stateless; rules come from MySQL through a cache
// (rulestore.Loader). A MySQL failure is not a reject: the record's partition
// stalls alone and retries it after a backoff while the others go on.
//
// New builds the processor on its runtime from a Config; NewProcessor
// builds the processor alone (for rttest.Driver, or to wrap it):
//
//	rules, err := rulestore.New(rulestore.Config{}, db)
//	rt, err := room.New(room.Config{
//		Runtime: streams.Config{
//			Input: "hyapp.room.events.v1",
//			Group: "roomflow-room-processor",
//			DLQ:   "hyapp.room.events.dlq.v1",
//			Kafka: kafkax.Cluster{Brokers: brokers},
//		},
//		MicTopic:    "hyapp.user.mic-events.v1",
//		InflowTopic: "hyapp.activity.lucky-pool-inflow.v1",
//		AppCode:     "hyapp",
//	}, rules)
//	err = rt.Run(ctx)
package room

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hyapp/roomflow/domain/lucky"
	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/schemareg"
	"github.com/hyapp/roomflow/processors/streams"
	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Event types the processor knows.
const (
	EventRoomMicChanged  = "RoomMicChanged"
	EventRoomGiftSent    = "RoomGiftSent"
	EventLuckyPoolInflow = "LuckyPoolInflow"
)

// Consumes reports whether the room processor needs eventType on
// kafka.topics.room_events. cmd/roomflow refuses a relay.routes entry that
// would send such a type elsewhere, where the processor never reads it.
func Consumes(eventType string) bool {
	return eventType == EventRoomMicChanged || eventType == EventRoomGiftSent
}

// passBy are the other room event types of the design: not the room
// processor's business, not an error.
var passBy = map[string]bool{
	"RoomUserJoined": true, "RoomUserLeft": true, "RoomUserKicked": true, "RoomClosed": true,
	"RoomCreated": true, "RoomHeatChanged": true, "RoomRankChanged": true,
}

// DLQ reasons (the error_reason header and the metric label).
const (
	ReasonDecodeEnvelope     = "decode_envelope"
	ReasonInvalidEnvelope    = "invalid_envelope"
	ReasonUnknownEventType   = "unknown_event_type"
	ReasonDecodePayload      = "decode_payload"
	ReasonNegativeHeat       = "negative_heat"
	ReasonUnknownRuleVersion = "unknown_rule_version"
	ReasonInvalidRule        = "invalid_rule"
	ReasonOverflow           = "overflow"
)

// RejectReasons lists every DLQ reason above and the heat above its bound
// (envelope.ReasonAmountOutOfRange): the runtime creates their
// roomflow_process_dlq_total series at 0 (streams.Config.RejectReasons).
var RejectReasons = []string{ReasonDecodeEnvelope, ReasonInvalidEnvelope, envelope.ReasonPaddedID, ReasonUnknownEventType, ReasonDecodePayload,
	ReasonNegativeHeat, envelope.ReasonAmountOutOfRange, ReasonUnknownRuleVersion, ReasonInvalidRule, ReasonOverflow}

// Envelope field bounds of the design's contract (room_outbox columns).
const (
	maxEventID = 128
	maxAppCode = 32
	maxRoomID  = 64
)

// RuleSource returns validated lucky rule versions; rulestore.Loader is one.
// Errors wrapping lucky.ErrUnknownRule or lucky.ErrInvalidRule are
// rejects; any other error is transient.
type RuleSource interface {
	Get(ctx context.Context, giftID, version string) (*lucky.Rule, error)
}

// Processor is the room processor's streams.Processor.
type Processor struct {
	micTopic    string
	inflowTopic string
	inflowFrame envelope.Framing // of InflowTopic's records
	rules       RuleSource
	appCode     []byte // for envelopes without app_code (config app_code)

	// reused decode targets (Process runs on one goroutine)
	env  envelope.View
	mic  envelope.MicChanged
	gift envelope.GiftSent
}

// Name is the room processor's runtime name: the processor label of its
// metrics and logs, the stage of its dead letters.
const Name = "room"

// Config is everything New needs besides the rules.
type Config struct {
	// Runtime is the runtime the processor runs on: Input (the room
	// events), Group, DLQ, commit bounds, Kafka, Registerer, Logger and the
	// rest (see streams.Config; its defaults apply). Name defaults to
	// Name ("room"). The processor keeps no state: Changelog stays empty.
	// Required: Input, Group, DLQ, Kafka.Brokers.
	Runtime streams.Config
	// MicTopic receives every RoomMicChanged re-keyed by user_id
	// (hyapp.user.mic-events.v1). Required.
	MicTopic string
	// InflowTopic receives the LuckyPoolInflow of lucky gifts
	// (hyapp.activity.lucky-pool-inflow.v1). Required.
	InflowTopic string
	// Frames frames InflowTopic's records (kafka.public_wire_format);
	// zero: plain.
	Frames schemareg.Frames
	// AppCode is the app_code of an envelope that carries none, the rule
	// of every stage: its outputs carry it in headers and values, so they
	// are the same as for an envelope naming it. At most 32 bytes of
	// UTF-8.
	// Default "": such an envelope's outputs carry none either (the mic
	// processor then dead-letters them).
	AppCode string
}

func (c *Config) setDefaults() {
	cfgerr.Default(&c.Runtime.Name, Name)
}

// Validate reports the invalid fields of c with its defaults applied:
// "mic_topic", "inflow_topic", "app_code", and the runtime's under
// "runtime." ("runtime.group").
func (c Config) Validate() error {
	c.setDefaults()
	var ch cfgerr.Checks
	ch.Set("mic_topic", c.MicTopic)
	ch.Set("inflow_topic", c.InflowTopic)
	if _, err := c.inflowFrame(); err != nil {
		ch.Bad("frames", "%v", err)
	}
	if len(c.AppCode) > maxAppCode {
		ch.Bad("app_code", "must be at most %d bytes (got %d)", maxAppCode, len(c.AppCode))
	}
	// It fills in envelopes and inflows as a protobuf string: an inflow
	// would never marshal, and its partition would stall for good.
	if !utf8.ValidString(c.AppCode) {
		ch.Bad("app_code", "must be valid UTF-8 (got %q)", c.AppCode)
	}
	ch.Add(cfgerr.Under("runtime", nil, c.Runtime.Validate()))
	return ch.Err()
}

// NewProcessor returns the processor of cfg alone, without its runtime
// (cfg.Runtime is not used): for rttest.Driver, or to wrap it in another
// streams.Processor. It does not validate cfg; New does.
func NewProcessor(cfg Config, rules RuleSource) *Processor {
	f, _ := cfg.inflowFrame() // validated by New
	return &Processor{micTopic: cfg.MicTopic, inflowTopic: cfg.InflowTopic, inflowFrame: f, rules: rules, appCode: []byte(cfg.AppCode)}
}

func (c Config) inflowFrame() (envelope.Framing, error) {
	return c.Frames.For(c.InflowTopic, (&activityv1.LuckyPoolInflow{}).ProtoReflect().Descriptor())
}

// New validates cfg and builds the room processor on its runtime, reading
// lucky rules from rules (a rulestore.Loader). It does not connect.
func New(cfg Config, rules RuleSource) (*streams.Runtime, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rules == nil {
		return nil, errors.New("room: nil rule source")
	}
	rc := cfg.Runtime
	rc.RejectReasons = append(slices.Clip(rc.RejectReasons), RejectReasons...)
	rt, err := streams.New(rc, NewProcessor(cfg, rules))
	return rt, cfgerr.Under("runtime", nil, err)
}

var marshal = proto.MarshalOptions{Deterministic: true}

// micOut is one re-keyed mic event: record, headers and key in a single
// allocation.
type micOut struct {
	rec kgo.Record
	hdr [4]kgo.RecordHeader
	key [20]byte
}

// Process handles one room event.
func (p *Processor) Process(t streams.Task, rec *kgo.Record) error {
	env := &p.env
	if err := env.Parse(rec.Value); err != nil {
		return streams.Reject(ReasonDecodeEnvelope, err)
	}
	if len(env.EventID) == 0 {
		return streams.Reject(ReasonInvalidEnvelope, errors.New("empty event_id"))
	}
	if len(env.EventID) > maxEventID || len(env.AppCode) > maxAppCode || len(env.RoomID) > maxRoomID {
		return streams.Rejectf(ReasonInvalidEnvelope, "event_id, app_code or room_id longer than %d, %d, %d bytes", maxEventID, maxAppCode, maxRoomID)
	}
	if err := envelope.CheckID("event_id", envelope.String(env.EventID)); err != nil {
		return streams.Reject(envelope.ReasonPaddedID, err)
	}
	// The rule of every stage: an empty app_code is the configured one. It
	// is resolved here once, in the forwarded mic envelope too (header and
	// value agree), so the mic processor sees the same app_code whether
	// room-service wrote it or left it out.
	omitted := len(env.AppCode) == 0
	if omitted {
		env.AppCode = p.appCode
	}
	switch string(env.EventType) { // no allocation
	case EventRoomMicChanged:
		if err := p.mic.Parse(env.Payload); err != nil {
			return streams.Reject(ReasonDecodePayload, fmt.Errorf("RoomMicChanged: %w", err))
		}
		value := rec.Value
		if omitted {
			value = withAppCode(rec.Value, p.appCode)
		}
		o := new(micOut)
		// Header values alias the envelope, which is forwarded unchanged
		// (but for a filled-in app_code).
		o.rec = kgo.Record{
			Topic:   p.micTopic,
			Key:     strconv.AppendInt(o.key[:0], p.mic.UserID, 10),
			Value:   value,
			Headers: envelope.AppendHeaders(o.hdr[:0], env.EventID, env.EventType, env.AppCode),
		}
		t.Emit(&o.rec)
		return nil
	case EventRoomGiftSent:
		return p.gifted(t, env)
	default:
		if passBy[string(env.EventType)] {
			return nil
		}
		return streams.Reject(ReasonUnknownEventType, fmt.Errorf("event_type %q", env.EventType))
	}
}

func (p *Processor) gifted(t streams.Task, env *envelope.View) error {
	g := &p.gift
	if err := g.Parse(env.Payload); err != nil {
		return streams.Reject(ReasonDecodePayload, fmt.Errorf("RoomGiftSent: %w", err))
	}
	if !g.Lucky {
		return nil
	}
	if g.HeatValue < 0 {
		return streams.Reject(ReasonNegativeHeat, fmt.Errorf("heat_value %d", g.HeatValue))
	}
	// The sink refuses an inflow above the bound: such a gift never becomes one.
	if err := envelope.CheckAmount("heat_value", g.HeatValue, envelope.MaxGiftCoins); err != nil {
		return streams.Reject(envelope.ReasonAmountOutOfRange, fmt.Errorf("gift %q: %w", g.GiftID, err))
	}
	if len(env.RoomID) == 0 {
		return streams.Reject(ReasonInvalidEnvelope, errors.New("lucky gift without room_id"))
	}
	// The inflow's keys downstream: its draw claim and its pool rows.
	for _, id := range [...][2]string{{"draw_id", envelope.String(g.DrawID)}, {"room_id", envelope.String(env.RoomID)}, {"gift_id", envelope.String(g.GiftID)}} {
		if err := envelope.CheckID(id[0], id[1]); err != nil {
			return streams.Reject(envelope.ReasonPaddedID, err)
		}
	}
	if len(g.LuckyRuleVersion) == 0 {
		return streams.Reject(ReasonUnknownRuleVersion, fmt.Errorf("gift %q: empty lucky_rule_version", g.GiftID))
	}
	giftID, ruleVersion := string(g.GiftID), string(g.LuckyRuleVersion)
	rule, err := p.rules.Get(t.Context(), giftID, ruleVersion)
	switch {
	case errors.Is(err, lucky.ErrUnknownRule):
		return streams.Reject(ReasonUnknownRuleVersion, err)
	case errors.Is(err, lucky.ErrInvalidRule):
		return streams.Reject(ReasonInvalidRule, err)
	case err != nil:
		return err // transient: the partition stalls and retries the record
	}
	in, err := lucky.ComputeInflow(g.HeatValue, rule)
	switch {
	case errors.Is(err, lucky.ErrOverflow):
		return streams.Reject(ReasonOverflow, err)
	case errors.Is(err, lucky.ErrNegativeHeat):
		return streams.Reject(ReasonNegativeHeat, err)
	case err != nil:
		return streams.Reject(ReasonInvalidRule, err)
	}
	src := string(env.EventID)
	id := EventLuckyPoolInflow + ":" + src
	appCode, roomID := string(env.AppCode), string(env.RoomID)
	// After the framing's prefix (nil: plain; clipped, so appending copies).
	b, err := marshal.MarshalAppend(p.inflowFrame.Prefix, &activityv1.LuckyPoolInflow{
		EventId:       id,
		AppCode:       appCode,
		RoomId:        roomID,
		GiftId:        giftID,
		RuleVersion:   ruleVersion,
		HeatValue:     g.HeatValue,
		PoolIn:        in.PoolIn,
		PlatformIn:    in.PlatformIn,
		RoomIn:        in.RoomIn,
		GiftIn:        in.GiftIn,
		OccurredAtMs:  env.OccurredAtMs,
		SourceEventId: src,
		DrawId:        string(g.DrawID),
	})
	if err != nil {
		return fmt.Errorf("marshal LuckyPoolInflow: %w", err)
	}
	t.Emit(&kgo.Record{
		Topic:   p.inflowTopic,
		Key:     []byte(roomID),
		Value:   b,
		Headers: envelope.AppendHeadersAs(make([]kgo.RecordHeader, 0, 4), []byte(id), typeLuckyPoolInflow, []byte(appCode), p.inflowFrame.Header()),
	})
	return nil
}

var typeLuckyPoolInflow = []byte(EventLuckyPoolInflow)

// withAppCode returns a copy of the envelope b with app_code set to app:
// the field appended at the end, where protobuf parsers let the last
// occurrence of a singular field win (b is left unchanged; it is the
// consumed record's value).
func withAppCode(b, app []byte) []byte {
	out := make([]byte, 0, len(b)+2+len(app))
	out = append(out, b...)
	out = protowire.AppendTag(out, 3, protowire.BytesType)
	return protowire.AppendBytes(out, app)
}
