package envelope

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzTrustedView checks ParseTrusted against Parse: on every input Parse
// accepts, the same fields; a wire error of Parse is ParseTrusted's too;
// only Parse's ErrInvalidUTF8 may be accepted (the one check skipped).
func FuzzTrustedView(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v, tv View
		checkTrusted(t, b, v.Parse(b), tv.ParseTrusted(b), v, tv)
		var m, tm MicChanged
		checkTrusted(t, b, m.Parse(b), tm.ParseTrusted(b), m, tm)
	})
}

func checkTrusted(t *testing.T, b []byte, err, terr error, v, tv any) {
	t.Helper()
	switch {
	case err == nil && terr != nil:
		t.Fatalf("%x: Parse accepts, ParseTrusted refuses: %v", b, terr)
	case err != nil && !errors.Is(err, ErrInvalidUTF8) && (terr == nil || terr.Error() != err.Error()):
		t.Fatalf("%x: Parse error %v, ParseTrusted error %v", b, err, terr)
	case err == nil && !reflect.DeepEqual(v, tv):
		t.Fatalf("%x: Parse %+v, ParseTrusted %+v", b, v, tv)
	}
}

// TestParseTrustedSkipsUTF8: the one difference, on purpose.
func TestParseTrustedSkipsUTF8(t *testing.T) {
	b := []byte{0x0a, 0x03, 'a', 0xff, 'b'} // event_id "a\xffb"
	var v View
	if err := v.Parse(b); !errors.Is(err, ErrInvalidUTF8) {
		t.Fatalf("Parse: %v, want ErrInvalidUTF8", err)
	}
	if err := v.ParseTrusted(b); err != nil || string(v.EventID) != "a\xffb" {
		t.Fatalf("ParseTrusted: %v, event_id %q", err, v.EventID)
	}
}
