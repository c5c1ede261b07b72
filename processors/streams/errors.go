package streams

import (
	"errors"
	"fmt"
)

// RejectError is a record the processor refuses: it cannot be decoded, or
// violates a rule no retry can fix. Process returning one (wrapped or not)
// sends the input record to the DLQ with Reason, and processing moves on.
type RejectError struct {
	// Reason is a short, stable, low-cardinality label ("decode_envelope",
	// "unknown_rule_version", ...). It is the DLQ metric's reason label and
	// the `error_reason` header.
	Reason string
	// Err is the detail; its message goes into the `error` header. It must
	// not carry secrets.
	Err error
}

// Reject returns a *RejectError with reason and err (err may be nil).
func Reject(reason string, err error) error { return &RejectError{Reason: reason, Err: err} }

// Rejectf is Reject with a formatted detail.
func Rejectf(reason, format string, args ...any) error {
	return &RejectError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

func (e *RejectError) Error() string {
	if e.Err == nil {
		return "rejected: " + e.Reason
	}
	return "rejected: " + e.Reason + ": " + e.Err.Error()
}

func (e *RejectError) Unwrap() error { return e.Err }

// AsReject reports whether err is or wraps a *RejectError.
func AsReject(err error) (*RejectError, bool) {
	var r *RejectError
	ok := errors.As(err, &r)
	return r, ok
}

// ReasonCorruptState is the DLQ reason of a record whose processing met a
// *CorruptStateError.
const ReasonCorruptState = "corrupt_state"

// ReasonOutputTooLarge is the DLQ reason of a record whose processing
// emitted a record above MaxRecordBytes, which the producer refuses for
// good: retrying it would abort every transaction of the runtime.
const ReasonOutputTooLarge = "output_too_large"

// CorruptStateError is a state value the processor cannot decode. No retry
// can fix it, so instead of stalling the partition the runtime sends the
// record that read it to the DLQ with reason corrupt_state (and discards
// what processing it emitted or wrote), like a Reject. The value stays in
// the store: later records of the same key meet it too, and go to the DLQ
// with the same reason until an operator repairs the state.
type CorruptStateError struct {
	Key string // the store key whose value is corrupt
	Err error  // the decode error
}

// CorruptState returns a *CorruptStateError for key.
func CorruptState(key string, err error) error { return &CorruptStateError{Key: key, Err: err} }

func (e *CorruptStateError) Error() string {
	return fmt.Sprintf("corrupt state value of key %q: %v", e.Key, e.Err)
}

func (e *CorruptStateError) Unwrap() error { return e.Err }

// asDeadLetter reports whether err sends its record to the DLQ: a
// *RejectError, or a *CorruptStateError (as reason corrupt_state).
func asDeadLetter(err error) (*RejectError, bool) {
	if rej, ok := AsReject(err); ok {
		return rej, true
	}
	var cs *CorruptStateError
	if errors.As(err, &cs) {
		return &RejectError{Reason: ReasonCorruptState, Err: err}, true
	}
	return nil, false
}

// ErrKilled is returned by Run after Kill.
var ErrKilled = errors.New("runtime: killed")

// TxnError is a fatal transaction failure: GroupTransactSession.End
// returned an error (the transactional producer is fenced or in a failed
// state). Run returns it; the process should exit and be restarted.
type TxnError struct {
	Processor string
	Err       error
}

func (e *TxnError) Error() string {
	return "runtime " + e.Processor + ": end transaction: " + e.Err.Error()
}

func (e *TxnError) Unwrap() error { return e.Err }

// RestoreError is a failure to restore a partition's changelog.
type RestoreError struct {
	Topic     string
	Partition int32
	Err       error
}

func (e *RestoreError) Error() string {
	return fmt.Sprintf("runtime: restore %s/%d: %v", e.Topic, e.Partition, e.Err)
}

func (e *RestoreError) Unwrap() error { return e.Err }
