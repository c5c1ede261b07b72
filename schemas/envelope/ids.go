package envelope

import (
	"fmt"
	"strings"
)

// Ids that key roomflow's MySQL rows (event ids, mic session ids, draw,
// command, room and gift ids) are stored in utf8mb4_bin columns (migration
// 0015): byte exact, as every stage compares them in Go, but for trailing
// spaces, which every binary collation MySQL 8.0 and MariaDB share pads
// ("abc" and "abc " are one key). So no such id may end in a space: each
// stage that takes one from outside refuses it with CheckID (a dead letter
// with ReasonPaddedID, or InvalidArgument), and roomflow's own ids never
// end in one (docs/design.md, Event ids).

// ReasonPaddedID is the error_reason of a record refused because an id in
// it ends in a space, at every stage.
const ReasonPaddedID = "padded_id"

// IDError is an id that ends in a space.
type IDError struct {
	Field string // the id's field, such as "event_id"
	ID    string
}

// Error names the field and quotes the id, cut to 64 bytes (a refused id
// may be long or hostile).
func (e *IDError) Error() string {
	return fmt.Sprintf("envelope: %s %q ends in a space", e.Field, Clip(e.ID, 64))
}

// CheckID returns an *IDError when id, the value of field, ends in a space
// (U+0020, the only character PAD SPACE ignores), else nil.
func CheckID(field, id string) error {
	if strings.HasSuffix(id, " ") {
		return &IDError{Field: field, ID: id}
	}
	return nil
}
