// Package cfgerrtest holds the assertion every component's config tests
// share: an invalid value is refused under the operator's key.
package cfgerrtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/hyapp/roomflow/internal/cfgerr"
)

// NamesKey fails the test unless err refuses the value under key, with a
// message that starts with it ("config: <key>: ").
func NamesKey(t testing.TB, key string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: invalid value accepted", key)
	case !slices.Contains(cfgerr.Keys(err), key):
		t.Errorf("%s: error does not name the key: %v", key, err)
	case !strings.Contains(err.Error(), "config: "+key+": "):
		t.Errorf("%s: message %q does not start with the key", key, err)
	}
}
