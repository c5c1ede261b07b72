package cfgerr

import (
	"errors"
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
