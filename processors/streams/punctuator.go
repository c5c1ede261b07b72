package streams

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// punctuator runs the tasks' punctuations (Config.Punctuations) and store
// sweeps into the open transaction (Kafka Streams' PunctuationQueue). It
// keeps each task's schedule and reads the input's last stable offsets to
// gate every run (see punctRound); a failing run stalls its partition in
// the stall tracker.
type punctuator struct {
	sh     *shared
	txn    *txn
	stalls *stallTracker
	lso    lsoReads
	sched  map[int32]*schedule // per owned partition
}

// schedule is one task's timers.
type schedule struct {
	t         *task
	nextPunct []time.Time // per punctuation
	nextSweep time.Time
	// round is the punctuation tick waiting for the task to catch up with
	// its input; nil when none is due.
	round *punctRound
}

// punctRound is one punctuation tick of a task.
//
// Timers compare the runtime clock with the times in the state. Run while
// the task is behind its input (after a restart, a stall, a slow restore)
// a timer would close what the records still waiting in the partition
// close for real. So a tick first reads the last stable offset (LSO, the
// read_committed end) of the input partitions, and a task runs its due
// punctuations, with the tick's time, only once it has consumed its
// partition up to that offset: the outcome depends only on what Kafka held
// at the tick, not on how fast the task catches up. Until then the tick is
// deferred (checked again after every poll) and counted in
// roomflow_process_punctuations_deferred_total{reason="behind"}.
//
// A punctuation that calls Task.MoreDue keeps its round open as a catch-up:
// the same tick (now and LSO) runs again in the next transaction, after the
// current one has ended, and again while it reports more due. Each run is
// its own transaction, so a large backlog of due work commits as many
// bounded transactions with input records flowing in between, and the
// catch-up does exactly what one unbounded run at the tick would have done,
// less what those records settled meanwhile. The LSO gate is checked before
// every run: an aborted transaction rewinds the position to the last
// commit, and the catch-up then waits until the task has caught up again.
type punctRound struct {
	at       time.Time // runtime clock at the tick: the punctuations' now
	lso      int64     // the input partition's last stable offset at the tick
	deferred bool      // already counted as deferred
	// afterTxn, for a catch-up, is the transaction (txn.sequence) that holds the
	// previous run: the next run waits until that transaction has ended.
	afterTxn uint64
	catchUp  bool
}

const (
	// lsoTimeout bounds an LSO read.
	lsoTimeout = 5 * time.Second
	// lsoRetry is the wait after a failed LSO read: the tick is skipped,
	// never run blind.
	lsoRetry = 500 * time.Millisecond
	// catchUpPoll bounds the poll between two runs of a catch-up: it
	// takes the records already fetched and does not wait for more.
	catchUpPoll = time.Millisecond
)

// lsoReads is the LSO read of the input's partitions. It runs beside the
// processing loop, which must not wait on a slow or failing broker, and
// hands its answer over through done.
type lsoReads struct {
	inFlight bool
	done     chan lsoRead // buffered: the reader never blocks
	retryAt  time.Time    // no read before (after a failed one)
}

type lsoRead struct {
	at   time.Time // runtime clock when the read started: the tick
	lsos kadm.ListedOffsets
	err  error
}

func (pu *punctuator) init(sh *shared, x *txn, stalls *stallTracker) {
	pu.sh, pu.txn, pu.stalls = sh, x, stalls
	pu.sched = map[int32]*schedule{}
}

// add schedules t's punctuations and sweeps one interval from now.
func (pu *punctuator) add(t *task) {
	cfg := &pu.sh.cfg
	now := cfg.Now()
	s := &schedule{t: t, nextPunct: make([]time.Time, len(cfg.Punctuations)), nextSweep: now.Add(cfg.TTLSweepInterval)}
	for i, p := range cfg.Punctuations {
		s.nextPunct[i] = now.Add(p.Interval)
	}
	pu.sched[t.partition] = s
}

// remove drops partition p's schedule.
func (pu *punctuator) remove(p int32) { delete(pu.sched, p) }

// punctuate opens a round for every task with a due punctuation, runs the
// rounds of the tasks that caught up with their input, and sweeps expired
// store keys. A failing punctuation stalls its partition.
func (pu *punctuator) punctuate() {
	if len(pu.sched) == 0 {
		return
	}
	now := pu.sh.cfg.Now()
	pu.openRounds(now)
	var pos map[int32]int64
	for _, s := range pu.sched {
		t := s.t
		if s.round != nil && !pu.stalls.waiting(t.partition) && (!s.round.catchUp || s.round.afterTxn != pu.txn.sequence()) {
			if pos == nil {
				pos = pu.positions()
			}
			if pos[t.partition] >= s.round.lso {
				round := *s.round
				s.round = nil
				pu.runPunctuations(s, round)
			} else if !s.round.deferred {
				s.round.deferred = true
				pu.sh.m.deferred.WithLabelValues(pu.sh.name, "behind").Inc()
			}
		}
		if t.store != nil && !now.Before(s.nextSweep) {
			s.nextSweep = now.Add(pu.sh.cfg.TTLSweepInterval)
			if t.store.sweepExpired(now) > 0 {
				pu.txn.markContent()
			}
		}
	}
}

// needsRound reports whether s has no round open and a punctuation due
// at now.
func (pu *punctuator) needsRound(s *schedule, now time.Time) bool {
	if s.round != nil || pu.stalls.waiting(s.t.partition) {
		return false
	}
	for i := range pu.sh.cfg.Punctuations {
		if !now.Before(s.nextPunct[i]) {
			return true
		}
	}
	return false
}

// openRounds opens the rounds of the tasks due at the tick of a finished
// LSO read, and starts a read (one request for every task) when a task
// needs a round and none is in flight.
func (pu *punctuator) openRounds(now time.Time) {
	if pu.lso.done == nil {
		pu.lso.done = make(chan lsoRead, 1)
	}
	select {
	case res := <-pu.lso.done:
		pu.lso.inFlight = false
		pu.applyLSOs(res)
	default:
	}
	if pu.lso.inFlight || time.Now().Before(pu.lso.retryAt) {
		return
	}
	for _, s := range pu.sched {
		if pu.needsRound(s, now) {
			pu.lso.inFlight = true
			go func() {
				ctx, cancel := context.WithTimeout(pu.sh.ctx, lsoTimeout)
				defer cancel()
				lsos, err := pu.sh.adm.ListCommittedOffsets(ctx, pu.sh.cfg.Input) // read_committed: the LSO
				pu.lso.done <- lsoRead{at: now, lsos: lsos, err: err}
			}()
			return
		}
	}
}

// applyLSOs opens a round at res.at for every task due then; a task whose
// LSO is missing waits for the next read.
func (pu *punctuator) applyLSOs(res lsoRead) {
	failed, err := 0, res.err
	for _, s := range pu.sched {
		if !pu.needsRound(s, res.at) {
			continue
		}
		lo, ok := res.lsos.Lookup(pu.sh.cfg.Input, s.t.partition)
		switch {
		case ok && lo.Err == nil:
			s.round = &punctRound{at: res.at, lso: lo.Offset}
			continue
		case ok && err == nil:
			err = lo.Err
		case err == nil:
			err = errors.New("partition missing from the answer")
		}
		failed++
	}
	if failed == 0 {
		return
	}
	pu.lso.retryAt = time.Now().Add(lsoRetry)
	pu.sh.m.deferred.WithLabelValues(pu.sh.name, "lso_unavailable").Add(float64(failed))
	if pu.sh.ctx.Err() == nil && !pu.sh.killed.Load() {
		pu.sh.log.Warn("cannot read the input's last stable offsets; punctuations wait", "topic", pu.sh.cfg.Input,
			"tasks", failed, "error", err, "retry", lsoRetry.String())
	}
}

// positions returns the consume position of each owned input partition:
// the offset after the last record polled, else the group's committed
// offset (absent: 0). When punctuate runs, every polled record has been
// processed or its partition set back to it (stallTracker.record), so this
// is what the tasks have consumed. Control records (transaction markers)
// are polled too (KeepControlRecords), so a caught-up position reaches the
// LSO.
func (pu *punctuator) positions() map[int32]int64 {
	cl := pu.sh.client()
	pos := map[int32]int64{}
	for p, eo := range cl.CommittedOffsets()[pu.sh.cfg.Input] {
		pos[p] = eo.Offset
	}
	for p, eo := range cl.UncommittedOffsets()[pu.sh.cfg.Input] {
		pos[p] = eo.Offset
	}
	return pos
}

// runPunctuations runs the punctuations of s's task due at the round's
// tick, with its time as their now. One that calls MoreDue stays due at
// the tick: the round is kept as a catch-up and the open transaction is
// committed at once (see punctRound).
func (pu *punctuator) runPunctuations(s *schedule, round punctRound) {
	t, at := s.t, round.at
	more := false
	for i, p := range pu.sh.cfg.Punctuations {
		if at.Before(s.nextPunct[i]) {
			continue
		}
		pu.txn.markContent()
		emits, pmore, err := t.punctuation(p.Fn, at)
		if err != nil {
			pu.stalls.punctuation(t, p.Name, err)
			return
		}
		pu.txn.punctuated(p.Name, emits)
		pu.stalls.punctuationRan(t, p.Name)
		if pmore {
			more = true // still due at the tick: runs again in the next transaction
			continue
		}
		// Next run one interval after this one, skipping missed runs.
		next := s.nextPunct[i].Add(p.Interval)
		if !next.After(at) {
			next = at.Add(p.Interval)
		}
		s.nextPunct[i] = next
	}
	if more {
		s.round = &punctRound{at: at, lso: round.lso, catchUp: true, afterTxn: pu.txn.sequence()}
		pu.txn.holdCatchUp()
	}
}
