package sqlbuild

import (
	"reflect"
	"testing"
)

func TestPlaceholders(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{List(0), ""}, {List(1), "?"}, {List(3), "?,?,?"},
		{Rows(1, 2), "(?,?)"}, {Rows(3, 1), "(?),(?),(?)"}, {Rows(2, 3), "(?,?,?),(?,?,?)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if got := Flatten([][]any{{1, "a"}, {2, "b"}}); !reflect.DeepEqual(got, []any{1, "a", 2, "b"}) {
		t.Errorf("Flatten = %v", got)
	}
	if got := Args([]string{"x", "y"}); !reflect.DeepEqual(got, []any{"x", "y"}) {
		t.Errorf("Args = %v", got)
	}
}
