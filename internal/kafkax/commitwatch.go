package kafkax

import (
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// silentAbort is how franz-go says it ended a TryCommit as an abort.
const silentAbort = "no produce succeeded in this transaction but produces were attempted"

// CommitWatch notices franz-go ending a commit as an abort without an
// error. When none of a producer-only transaction's partitions counts as
// added on the client's side, EndTransaction(TryCommit) logs silentAbort,
// aborts, and returns nil. With v1.22.3 that happened once after a
// produce that had succeeded (a relay child under heavy load, see
// docs/reliability.md, finding 11): the caller took an abort for a commit.
// A transaction that also commits group offsets is not affected.
//
// Install it as the client's logger (Opt), Reset it when a transaction
// begins, and ask Aborted after EndTransaction: true means the commit did
// not happen. It passes the lines the component's logger would get on.
type CommitWatch struct {
	next    kgo.Logger
	aborted atomic.Bool
}

// NewCommitWatch is a CommitWatch passing lines on to component's logger
// (as Opts installs it; none without Logger).
func (c Cluster) NewCommitWatch(component string) *CommitWatch {
	return &CommitWatch{next: c.logger(component)}
}

// Opt installs w as the client's logger; pass it after Opts.
func (w *CommitWatch) Opt() kgo.Opt { return kgo.WithLogger(w) }

// Reset forgets an abort seen before; call it when a transaction begins.
func (w *CommitWatch) Reset() { w.aborted.Store(false) }

// Aborted reports whether franz-go ended a commit as an abort since Reset.
func (w *CommitWatch) Aborted() bool { return w.aborted.Load() }

// Level asks for info lines: the silent abort is one.
func (w *CommitWatch) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (w *CommitWatch) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if strings.HasPrefix(msg, silentAbort) {
		w.aborted.Store(true)
	}
	if w.next != nil && level <= w.next.Level() {
		w.next.Log(level, msg, keyvals...)
	}
}
