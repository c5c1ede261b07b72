package streams

import "github.com/twmb/franz-go/pkg/kgo"

// AssignForTest hands ps to the runtime as the group's OnPartitionsAssigned
// would, whether or not it already holds them.
func (r *Runtime) AssignForTest(ps []int32) { r.group.push(evAssigned, ps) }

// SilentAbortForTest makes the runtime's commit watch see franz-go's
// silent-abort line, as if the transaction open now ended so.
func (r *Runtime) SilentAbortForTest() {
	r.watch.Log(kgo.LogLevelInfo, "no produce succeeded in this transaction but produces were attempted; issuing an abort")
}
