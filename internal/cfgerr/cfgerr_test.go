package cfgerr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestUnderRekeysJoinedFieldErrors(t *testing.T) {
	var c Checks
	c.Positive("batch_size", 0)
	c.Set("topic", "")
	c.Add(errors.New("plain"))
	err := Under("relay", map[string]string{"topic": "kafka.topics.room_events"}, c.Err())
	got := err.Error()
	for _, want := range []string{"config: relay.batch_size: must be > 0 (got 0)", "config: kafka.topics.room_events: must be set", "plain"} {
		if !strings.Contains(got, want) {
			t.Errorf("error %q lacks %q", got, want)
		}
	}
	var fe *FieldError
	if !errors.As(err, &fe) || !strings.Contains(fe.Key, ".") {
		t.Errorf("errors.As(FieldError) = %v, want a dotted key", fe)
	}
	if Under("x", nil, nil) != nil {
		t.Error("Under(nil) != nil")
	}
	var empty Checks
	if empty.Err() != nil {
		t.Error("no checks failed, Err() != nil")
	}
}

func TestTopic(t *testing.T) {
	for name, ok := range map[string]bool{"hyapp.room.events.v1": true, "a_b-C9": true, "": false, ".": false, "..": false,
		"no spaces": false, "bad!": false, strings.Repeat("a", 249): true, strings.Repeat("a", 250): false} {
		var c Checks
		c.Topic("topic", name)
		if err := c.Err(); (err == nil) != ok {
			t.Errorf("Topic(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

func TestIsUsage(t *testing.T) {
	plain := errors.New("dial tcp: connection refused")
	field := &FieldError{Key: "relay.batch_size", Msg: "must be > 0"}
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{plain, false},
		{fmt.Errorf("relay: %w", plain), false},
		{Usage(errors.New("unknown flag: --x")), true},
		{fmt.Errorf("config file x: %w", Usage(plain)), true},
		{field, true},
		{fmt.Errorf("relay: %w", errors.Join(plain, field)), true},
	}
	for _, tc := range cases {
		if got := IsUsage(tc.err); got != tc.want {
			t.Errorf("IsUsage(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if Usage(nil) != nil {
		t.Error("Usage(nil) must be nil")
	}
	wrapped := Usage(fmt.Errorf("config file x: %w", errors.Join(field, &FieldError{Key: "sink.group", Msg: "must be set"})))
	if got := Keys(wrapped); strings.Join(got, ",") != "relay.batch_size,sink.group" {
		t.Errorf("Keys through wrappers = %v", got)
	}
}
