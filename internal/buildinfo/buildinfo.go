// Package buildinfo says which roomflow build is running: the version and
// VCS revision the release build stamps in with -ldflags, and the Go
// version. `roomflow --version` prints it and every process exports it as
// roomflow_build_info, so a dashboard or an alert can tell the releases
// of a rollout apart.
//
// The Makefile's build target and deploy/Dockerfile set both variables:
//
//	go build -ldflags "-X github.com/hyapp/roomflow/internal/buildinfo.Version=$(git describe --tags --always --dirty) \
//	  -X github.com/hyapp/roomflow/internal/buildinfo.Revision=$(git rev-parse HEAD)" ./cmd/roomflow
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release, from `git describe --tags --always --dirty` at
// build time; "dev" for a plain `go build`.
var Version = "dev"

// Revision is the full VCS commit, set by -ldflags; when empty (go build,
// go run, go test) it is read from the build's embedded VCS stamp (empty
// when the build had none, e.g. -buildvcs=false or outside a checkout).
var Revision = ""

// Info is one build's identity.
type Info struct {
	Version   string
	Revision  string
	GoVersion string
}

var revision = sync.OnceValue(func() string {
	if Revision != "" {
		return Revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
})

// Get returns the running build's Info.
func Get() Info {
	return Info{Version: Version, Revision: revision(), GoVersion: runtime.Version()}
}

// String is "<version> (revision <rev>, <go version>)", what --version
// prints.
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	return i.Version + " (revision " + rev + ", " + i.GoVersion + ")"
}

// Collector is the gauge roomflow_build_info{version,revision,go_version},
// always 1: join it onto other series (`* on (instance) group_left(version)
// roomflow_build_info`) to label them with the release.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "roomflow_build_info",
		Help:        "Always 1; its labels are the running build's version (git describe), VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "go_version": i.GoVersion},
	})
	g.Set(1)
	return g
}
