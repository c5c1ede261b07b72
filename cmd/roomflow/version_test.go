package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// `roomflow --version` prints what -ldflags stamped in, the way `make
// build` and deploy/Dockerfile set it (buildinfo.Version, .Revision).
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "roomflow")
	const pkg = "github.com/hyapp/roomflow/internal/buildinfo"
	build := exec.Command("go", "build", "-ldflags", "-X "+pkg+".Version=v9.9.9-test -X "+pkg+".Revision=0123abc", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("roomflow --version: %v\n%s", err, out)
	}
	if want := "roomflow version v9.9.9-test (revision 0123abc, " + runtime.Version() + ")\n"; string(out) != want {
		t.Fatalf("roomflow --version printed %q, want %q", out, want)
	}
}
