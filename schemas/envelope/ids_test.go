package envelope_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// TestCheckID: an id ending in U+0020 is refused, naming its field; other
// trailing whitespace, inner and leading spaces are not what PAD SPACE
// ignores and pass; the message quotes at most 64 bytes of the id.
func TestCheckID(t *testing.T) {
	for id, refused := range map[string]bool{
		"abc": false, "": false, " abc": false, "a b": false, "abc\t": false, "abc\u00a0": false, "ABC": false,
		"abc ": true, " ": true, "abc  ": true,
	} {
		err := envelope.CheckID("event_id", id)
		var ie *envelope.IDError
		if refused != (err != nil) || (err != nil && (!errors.As(err, &ie) || ie.Field != "event_id" || ie.ID != id)) {
			t.Errorf("CheckID(%q) = %v, refused %v", id, err, refused)
		}
	}
	long := strings.Repeat("é", 100) + " "
	msg := envelope.CheckID("mic_session_id", long).Error()
	if !strings.Contains(msg, "mic_session_id") || strings.Contains(msg, strings.Repeat("é", 33)) || !strings.Contains(msg, strings.Repeat("é", 32)) {
		t.Errorf("message %q: want the field and the id's first 64 bytes", msg)
	}
}
