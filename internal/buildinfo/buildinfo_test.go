package buildinfo_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyapp/roomflow/internal/buildinfo"
	"github.com/hyapp/roomflow/internal/testenv"
)

// The gauge is 1 with the build's labels (cmd/roomflow's TestVersionFlag
// builds with -ldflags).
func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildinfo.Collector())
	i := buildinfo.Get()
	v, ok := testenv.Metric(reg, "roomflow_build_info", "version", buildinfo.Version, "revision", i.Revision, "go_version", runtime.Version())
	if !ok || v != 1 {
		t.Fatalf("roomflow_build_info{version=%q,revision=%q,go_version=%q} = %v (found %v), want 1", buildinfo.Version, i.Revision, runtime.Version(), v, ok)
	}
	if s := i.String(); !strings.HasPrefix(s, buildinfo.Version+" (revision ") || !strings.HasSuffix(s, runtime.Version()+")") {
		t.Errorf("String() = %q", s)
	}
}
