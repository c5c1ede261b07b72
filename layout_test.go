// Package roomflow holds no code: its test keeps the package layout of
// docs/architecture.md.
package roomflow

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hyapp/roomflow"

// mayImport is the import rule of docs/architecture.md: the top-level
// directories whose packages a package under each one may import, besides
// its own. cmd/ and benchmarks/ wire everything together, tools/ holds
// what the one-shot commands do across the roles, and chaos/ runs the
// whole binary under faults: they may import anything. Test files are not
// checked. deploy/ is a module of its own (its tests' libraries stay out of
// this go.mod), so `go list ./...` does not reach it.
var mayImport = map[string][]string{
	"schemas":    {},
	"internal":   {"schemas"},
	"domain":     {"internal", "schemas"},
	"producers":  {"domain", "internal", "schemas"},
	"processors": {"domain", "internal", "schemas"},
	"sinks":      {"domain", "internal", "schemas"},
	"services":   {"domain", "internal", "schemas"},
}

var wiring = []string{"cmd", "benchmarks", "tools", "chaos"}

// forbidden reports why package from may not import package to (paths
// relative to the module), or "" if it may.
func forbidden(from, to string) string {
	f, _, _ := strings.Cut(from, "/")
	d, _, _ := strings.Cut(to, "/")
	if f == d || slices.Contains(wiring, f) {
		return ""
	}
	allowed, known := mayImport[f]
	switch {
	case !known:
		return f + "/ is not in docs/architecture.md's package map"
	case !slices.Contains(allowed, d):
		return f + "/ may not import " + d + "/"
	}
	return ""
}

func TestForbidden(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		ok       bool
	}{
		{"services/luckydraw", "domain/lucky/rulestore", true},
		{"processors/room", "domain/lucky", true},
		{"processors/room", "processors/streams", true},
		{"sinks/mysql/luckystats", "internal/mysqlx", true},
		{"cmd/roomflow", "services/luckydraw", true},
		{"benchmarks/lucky", "sinks/mysql", true},
		{"tools/verify", "services/luckydraw", true},
		{"services/luckydraw", "processors/room", false},
		{"services/statsapi", "sinks/mysql", false},
		{"processors/room", "sinks/mysql", false},
		{"domain/lucky", "processors/room/roomtest", false},
		{"internal/config", "domain/lucky", false},
		{"schemas/envelope", "internal/obs", false},
		{"elsewhere/x", "internal/obs", false},
	} {
		if got := forbidden(tc.from, tc.to); (got == "") != tc.ok {
			t.Errorf("forbidden(%s, %s) = %q, want allowed=%v", tc.from, tc.to, got, tc.ok)
		}
	}
}

// TestLayout fails on a non-test file of the module that imports a
// package docs/architecture.md does not let it import.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		pkgs := strings.Fields(line)
		from, ok := strings.CutPrefix(pkgs[0], module+"/")
		if !ok {
			continue // the module root: this test alone
		}
		checked++
		for _, imp := range pkgs[1:] {
			to, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if why := forbidden(from, to); why != "" {
				t.Errorf("%s imports %s: %s", from, to, why)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("go list found %d packages:\n%s", checked, out)
	}
}
