package streams

// AssignForTest hands ps to the runtime as the group's OnPartitionsAssigned
// would, whether or not it already holds them.
func (r *Runtime) AssignForTest(ps []int32) { r.group.push(evAssigned, ps) }
