package mysqlsink

import (
	"fmt"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// Amount is a number a Decode checks against its bound (one of the
// envelope.Max* amount bounds).
type Amount struct {
	Name  string
	Value int64
	Max   int64
}

// CheckAmounts returns an envelope.ReasonAmountOutOfRange
// InvalidRecordError naming the event, the field, its value and its bound
// for the first amount outside [0, Max]: caught in Decode, it is one dead
// letter instead of a wrapped sum or a MySQL error 1690 that would stop the
// sink.
func CheckAmounts(eventID string, amounts ...Amount) error {
	for _, a := range amounts {
		if err := envelope.CheckAmount(a.Name, a.Value, a.Max); err != nil {
			return Invalid(envelope.ReasonAmountOutOfRange, "event_id %s: %v", eventID, err)
		}
	}
	return nil
}

// OverflowError is a batch's sum for one column that does not fit in
// int64. Decode's amount bounds keep every batch far from it, so it means
// a quantity lacks a bound: the batch fails rather than write a wrapped
// value.
type OverflowError struct {
	Column string // table.column
	Sum    int64  // the sum so far
	Add    int64  // the amount that did not fit
}

func (e *OverflowError) Error() string {
	return fmt.Sprintf("mysql sink: %s: %d + %d overflows int64", e.Column, e.Sum, e.Add)
}

// Sums adds a batch's amounts per fact row with overflow-checked
// additions; Err reports the first that overflowed.
type Sums struct{ err error }

// Add adds v to *sum for column; on overflow *sum is left unchanged and
// the first such addition is kept for Err.
func (s *Sums) Add(column string, sum *int64, v int64) {
	r := *sum + v
	if (r > *sum) != (v > 0) { // the sum moved against v's sign: it wrapped
		if s.err == nil {
			s.err = &OverflowError{Column: column, Sum: *sum, Add: v}
		}
		return
	}
	*sum = r
}

// Err is the first overflow of Add (an *OverflowError), or nil.
func (s *Sums) Err() error { return s.err }
