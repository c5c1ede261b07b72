package envelope

import (
	"errors"
	"fmt"
)

// ErrNewerVersion matches every *VersionError with errors.Is.
var ErrNewerVersion = errors.New("written in a newer format version")

// VersionError is a value of an internal format written in a newer version
// than this release reads: a newer release wrote it (during a rolling
// upgrade, or after a rollback). The value is not corrupt; this release
// must not guess at it.
type VersionError struct {
	Format  string // e.g. "runtime changelog value", "mic session state"
	Version int    // the version the value names
	Newest  int    // the newest version this release reads
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("%s: version %d is newer than %d, the newest this release reads (written by a newer roomflow; finish the upgrade)",
		e.Format, e.Version, e.Newest)
}

// Is reports whether target is ErrNewerVersion.
func (e *VersionError) Is(target error) bool { return target == ErrNewerVersion }
