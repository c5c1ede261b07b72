package mysqlsink

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/schemas/envelope"
)

// Applier turns the records of one input topic into MySQL facts. The
// engine (Sink and Store) owns everything exactly-once about a batch —
// the partition claim and fence, the offsets, the transaction, retries,
// the DLQ and the metrics — and calls the applier twice per record:
//
//  1. Decode, when the record is polled, outside any transaction. An error
//     means the record can never be applied: the engine sends it to the
//     DLQ (reason: the InvalidRecordError's Reason, else "invalid") and
//     its offset advances with the batch. Decode must therefore validate
//     everything that could make Apply fail on this record alone (a value
//     wider than its column, CheckColumns; an amount past its bound, whose
//     sum would leave BIGINT, CheckAmounts), or one bad record would stall
//     its partition.
//  2. Apply, inside the engine's MySQL transaction, with the decoded items
//     of the batch that lie at or above their partition's stored offset,
//     in offset order per partition. Apply must be idempotent by event id:
//     Consumption.Consume records each item in the applier's own
//     consumption table and returns the ones seen for the first time, and
//     only those may change facts (a record is delivered again after a
//     crash between a dead letter and the commit, after a producer retry,
//     or by an upstream replay). Apply writes nothing outside tx and
//     returns every error, wrapped with %w if at all: the engine rolls the
//     whole batch back and retries it when the error is transient
//     (Retryable), else stops.
//
// The engine may call Apply for the same items again after a rollback, and
// concurrently for disjoint partition sets (see SharedRows).
type Applier[T any] interface {
	// Topic is the Kafka topic whose records the applier applies; one
	// applier per topic.
	Topic() string
	// Decode parses and validates one record (see above).
	Decode(rec *kgo.Record) (T, error)
	// Apply writes the facts of items in tx (see above).
	Apply(ctx context.Context, tx *Tx, items []T) (Applied, error)
	// SharedRows reports whether different partitions of Topic write the
	// same fact rows (every lucky pool inflow adds to the one platform
	// row). The engine then applies all of them in one transaction per
	// batch rather than in concurrent ones, so the hot row is written
	// once per batch instead of contended.
	SharedRows() bool
}

// Applied is what one Apply did, for the batch Result and the metrics.
type Applied struct {
	// Consumed counts the items by consumption outcome (Consume's result).
	Consumed Consumed
	// FactRows is the number of rows written per fact table, after any
	// pre-aggregation within the batch.
	FactRows map[string]int
}

// applier is an Applier with its item type erased, as the engine holds it.
type applier interface {
	Topic() string
	SharedRows() bool
	decode(rec *kgo.Record) (any, error)
	apply(ctx context.Context, tx *Tx, items []any) (Applied, error)
}

type typed[T any] struct{ Applier[T] }

func (a typed[T]) decode(rec *kgo.Record) (any, error) { return a.Decode(rec) }

func (a typed[T]) apply(ctx context.Context, tx *Tx, items []any) (Applied, error) {
	ts := make([]T, len(items))
	for i, it := range items {
		t, ok := it.(T)
		if !ok {
			return Applied{}, fmt.Errorf("mysql sink: %s applier: item of type %T, want %T", a.Topic(), it, t)
		}
		ts[i] = t
	}
	return a.Apply(ctx, tx, ts)
}

// appliers are the registered appliers by topic.
type appliers map[string]applier

// Registration is an Applier as a Store holds it, its item type erased:
// StoreConfig.Appliers lists them.
type Registration struct{ a applier }

// Register returns the registration of a for StoreConfig.Appliers. The
// sink consumes exactly the topics of its store's appliers, one applier
// per topic: NewStore refuses two for one topic (two kafka.topics keys
// naming the same topic).
func Register[T any](a Applier[T]) Registration { return Registration{typed[T]{a}} }

// InvalidRecordError says why a record can never be applied (undecodable
// bytes, a missing id, a value wider than its column). Decode returns it;
// the sink sends such records to the DLQ and moves on instead of blocking
// the partition.
type InvalidRecordError struct {
	Reason string // short, stable: "decode", "missing_event_id", ...
	Detail string
}

func (e *InvalidRecordError) Error() string {
	if e.Detail == "" {
		return "invalid record: " + e.Reason
	}
	return "invalid record: " + e.Reason + ": " + e.Detail
}

// Invalid returns an *InvalidRecordError with a formatted detail.
func Invalid(reason, format string, args ...any) error {
	return &InvalidRecordError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// CheckEventKey applies the rules every stage has for an event's identity
// and returns its key: the event id is required and ends in no space
// (envelope.CheckID), and an empty app_code is defaultAppCode (config
// app_code; the processors always fill it in, so only a foreign producer
// leaves it out); with both empty the event is invalid.
func CheckEventKey(eventID, appCode, defaultAppCode string) (EventKey, error) {
	if eventID == "" {
		return EventKey{}, Invalid("missing_event_id", "")
	}
	if err := envelope.CheckID("event_id", eventID); err != nil {
		return EventKey{}, Invalid(envelope.ReasonPaddedID, "%v", err)
	}
	if appCode == "" {
		appCode = defaultAppCode
	}
	if appCode == "" {
		return EventKey{}, Invalid("missing_app_code", "event_id %s", eventID)
	}
	return EventKey{AppCode: appCode, EventID: eventID}, nil
}

// Column is a string a Decode checks against the width of its column.
type Column struct {
	Name  string
	Value string
	Max   int // bytes
	// ID marks a byte-exact key column (migration 0015): its value may
	// not end in a space, which the collation pads.
	ID bool
}

// CheckColumns returns a "too_long" InvalidRecordError for the first value
// wider than its column, a ReasonPaddedID one for the first ID ending in a
// space: caught in Decode, each is one dead letter instead of a MySQL
// error (a duplicate key, for a padded id) that would stall the whole
// batch on every retry.
func CheckColumns(cols ...Column) error {
	for _, c := range cols {
		if len(c.Value) > c.Max {
			return Invalid("too_long", "%s is %d bytes, at most %d", c.Name, len(c.Value), c.Max)
		}
		if c.ID {
			if err := envelope.CheckID(c.Name, c.Value); err != nil {
				return Invalid(envelope.ReasonPaddedID, "%v", err)
			}
		}
	}
	return nil
}

// ApplierConfig is what every applier is built from: the topic it
// consumes and the app_code of a record that carries none.
type ApplierConfig struct {
	// Topic is the input topic (required).
	Topic string
	// DefaultAppCode is the app_code of a record whose app_code is empty,
	// at most MaxAppCode bytes; empty makes such a record invalid (a dead
	// letter, reason missing_app_code).
	DefaultAppCode string
}

// Input is what every applier keeps of its ApplierConfig: the topic it
// applies and the app_code of records naming none. Embed it.
type Input struct {
	topic, defaultAppCode string
}

// NewInput validates cfg and returns the Input of an applier's New.
func NewInput(cfg ApplierConfig) (Input, error) {
	if err := cfg.Validate(); err != nil {
		return Input{}, err
	}
	return Input{topic: cfg.Topic, defaultAppCode: cfg.DefaultAppCode}, nil
}

// Topic is the input topic (Applier.Topic).
func (in Input) Topic() string { return in.topic }

// DefaultAppCode is the app_code of a record whose app_code is empty.
func (in Input) DefaultAppCode() string { return in.defaultAppCode }

// MaxAppCode is the width of every fact table's app_code column.
const MaxAppCode = 32

// Validate names the problems by field: "topic", "default_app_code".
func (c ApplierConfig) Validate() error {
	var v cfgerr.Checks
	v.Topic("topic", c.Topic)
	if len(c.DefaultAppCode) > MaxAppCode {
		v.Bad("default_app_code", "must be at most %d bytes (got %d)", MaxAppCode, len(c.DefaultAppCode))
	}
	return v.Err()
}
