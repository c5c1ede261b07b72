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
