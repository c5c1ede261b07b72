package mysqlsink_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/schemas/envelope"
	mysqlsink "github.com/hyapp/roomflow/sinks/mysql"
)

func TestCheckAmounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		amounts []mysqlsink.Amount
		detail  string // "" = valid
	}{
		{"none", nil, ""},
		{"zero and the bound", []mysqlsink.Amount{{"a", 0, 10}, {"b", 10, 10}}, ""},
		{"one over", []mysqlsink.Amount{{"a", 0, 10}, {"b", 11, 10}}, "event_id e1: b is 11, outside [0, 10]"},
		{"negative", []mysqlsink.Amount{{"a", -1, 10}}, "event_id e1: a is -1, outside [0, 10]"},
		{"the first of two", []mysqlsink.Amount{{"a", math.MaxInt64, 10}, {"b", -1, 10}}, "event_id e1: a is 9223372036854775807, outside [0, 10]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mysqlsink.CheckAmounts("e1", tc.amounts...)
			var ie *mysqlsink.InvalidRecordError
			switch {
			case tc.detail == "" && err != nil:
				t.Fatalf("unexpected %v", err)
			case tc.detail != "" && (!errors.As(err, &ie) || ie.Reason != envelope.ReasonAmountOutOfRange || ie.Detail != tc.detail):
				t.Fatalf("%v, want reason %s, detail %q", err, envelope.ReasonAmountOutOfRange, tc.detail)
			}
		})
	}
}

func TestSums(t *testing.T) {
	for _, tc := range []struct {
		name     string
		start    int64
		add      []int64
		want     int64
		overflow bool
	}{
		{"small", 5, []int64{1, 2, 0}, 8, false},
		{"up to MaxInt64", math.MaxInt64 - 3, []int64{1, 2}, math.MaxInt64, false},
		{"past MaxInt64", math.MaxInt64 - 3, []int64{2, 2}, math.MaxInt64 - 1, true},
		{"two halves", 0, []int64{math.MaxInt64/2 + 1, math.MaxInt64/2 + 1}, math.MaxInt64/2 + 1, true},
		{"down to MinInt64", math.MinInt64 + 1, []int64{-1}, math.MinInt64, false},
		{"past MinInt64", math.MinInt64, []int64{-1}, math.MinInt64, true},
		{"back from the top", math.MaxInt64, []int64{-5, 5}, math.MaxInt64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s mysqlsink.Sums
			sum := tc.start
			for _, v := range tc.add {
				s.Add("t.c", &sum, v)
			}
			if sum != tc.want {
				t.Errorf("sum %d, want %d (an overflowing addition leaves it unchanged)", sum, tc.want)
			}
			var oe *mysqlsink.OverflowError
			if got := errors.As(s.Err(), &oe); got != tc.overflow || got && (oe.Column != "t.c" || !strings.Contains(oe.Error(), "t.c")) {
				t.Errorf("Err() = %v, want overflow %v", s.Err(), tc.overflow)
			}
		})
	}
}
