// Package chaos holds no code: its test, TestPipelineChaos, builds the
// roomflow binary and runs the pipeline's components as its child
// processes on kfake and MariaDB, injects seeded faults (kills, stops,
// broker and MySQL errors, IM failures) and then checks that every stage
// acted exactly once (docs/reliability.md). `make chaos` runs it with
// CHAOS_SEED and CHAOS_DURATION; `make test` replays one 2-minute
// schedule.
package chaos
