package streams

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

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
	// afterTxn, for a catch-up, is the transaction (txnSeq) that holds the
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

// punctuate opens a round for every task with a due punctuation, runs the
// rounds of the tasks that caught up with their input, and sweeps expired
// store keys. A failing punctuation stalls its partition (stallPunctuation).
func (r *Runtime) punctuate() {
	if len(r.tasks) == 0 {
		return
	}
	now := r.cfg.Now()
	r.openRounds(now)
	var pos map[int32]int64
	for _, t := range r.tasks {
		if t.round != nil && (t.stall == nil || !t.stall.waiting()) && (!t.round.catchUp || t.round.afterTxn != r.txnSeq) {
			if pos == nil {
				pos = r.positions()
			}
			if pos[t.partition] >= t.round.lso {
				round := *t.round
				t.round = nil
				r.runPunctuations(t, round)
			} else if !t.round.deferred {
				t.round.deferred = true
				r.m.deferred.WithLabelValues(r.name, "behind").Inc()
			}
		}
		if t.store != nil && !now.Before(t.nextSweep) {
			t.nextSweep = now.Add(r.cfg.TTLSweepInterval)
			if t.store.sweepExpired(now) > 0 {
				r.markContent()
			}
		}
	}
}

// needsRound reports whether t has no round open and a punctuation due
// at now.
func (r *Runtime) needsRound(t *task, now time.Time) bool {
	if t.round != nil || t.stall != nil && t.stall.waiting() {
		return false
	}
	for i := range r.cfg.Punctuations {
		if !now.Before(t.nextPunct[i]) {
			return true
		}
	}
	return false
}

// openRounds opens the rounds of the tasks due at the tick of a finished
// LSO read, and starts a read (one request for every task) when a task
// needs a round and none is in flight.
func (r *Runtime) openRounds(now time.Time) {
	if r.lso.done == nil {
		r.lso.done = make(chan lsoRead, 1)
	}
	select {
	case res := <-r.lso.done:
		r.lso.inFlight = false
		r.applyLSOs(res)
	default:
	}
	if r.lso.inFlight || time.Now().Before(r.lso.retryAt) {
		return
	}
	for _, t := range r.tasks {
		if r.needsRound(t, now) {
			r.lso.inFlight = true
			go func() {
				ctx, cancel := context.WithTimeout(r.runCtx, lsoTimeout)
				defer cancel()
				lsos, err := r.adm.ListCommittedOffsets(ctx, r.cfg.Input) // read_committed: the LSO
				r.lso.done <- lsoRead{at: now, lsos: lsos, err: err}
			}()
			return
		}
	}
}

// applyLSOs opens a round at res.at for every task due then; a task whose
// LSO is missing waits for the next read.
func (r *Runtime) applyLSOs(res lsoRead) {
	failed, err := 0, res.err
	for _, t := range r.tasks {
		if !r.needsRound(t, res.at) {
			continue
		}
		lo, ok := res.lsos.Lookup(r.cfg.Input, t.partition)
		switch {
		case ok && lo.Err == nil:
			t.round = &punctRound{at: res.at, lso: lo.Offset}
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
	r.lso.retryAt = time.Now().Add(lsoRetry)
	r.m.deferred.WithLabelValues(r.name, "lso_unavailable").Add(float64(failed))
	if r.runCtx.Err() == nil && !r.killed.Load() {
		r.log.Warn("cannot read the input's last stable offsets; punctuations wait", "topic", r.cfg.Input,
			"tasks", failed, "error", err, "retry", lsoRetry.String())
	}
}

// positions returns the consume position of each owned input partition:
// the offset after the last record polled, else the group's committed
// offset (absent: 0). When punctuate runs, every polled record has been
// processed or its partition set back to it (stallRecord), so this is
// what the tasks have consumed. Control records (transaction markers) are
// polled too (KeepControlRecords), so a caught-up position reaches the LSO.
func (r *Runtime) positions() map[int32]int64 {
	cl := r.sess.Client()
	pos := map[int32]int64{}
	for p, eo := range cl.CommittedOffsets()[r.cfg.Input] {
		pos[p] = eo.Offset
	}
	for p, eo := range cl.UncommittedOffsets()[r.cfg.Input] {
		pos[p] = eo.Offset
	}
	return pos
}

// runPunctuations runs t's punctuations due at the round's tick, with its
// time as their now. One that calls MoreDue stays due at the tick: the
// round is kept as a catch-up and the open transaction is committed at once
// (see punctRound).
func (r *Runtime) runPunctuations(t *task, round punctRound) {
	at := round.at
	more := false
	for i, p := range r.cfg.Punctuations {
		if at.Before(t.nextPunct[i]) {
			continue
		}
		r.markContent()
		emits, pmore, err := t.punctuation(p.Fn, at)
		if err != nil {
			r.stallPunctuation(t, p.Name, err)
			return
		}
		r.produceEmits(emits, time.Now())
		r.txnPunct[p.Name]++
		if t.stall != nil && t.stall.punct == p.Name {
			r.recovered(t)
		}
		if pmore {
			more = true // still due at the tick: runs again in the next transaction
			continue
		}
		// Next run one interval after this one, skipping missed runs.
		next := t.nextPunct[i].Add(p.Interval)
		if !next.After(at) {
			next = at.Add(p.Interval)
		}
		t.nextPunct[i] = next
	}
	if more {
		t.round = &punctRound{at: at, lso: round.lso, catchUp: true, afterTxn: r.txnSeq}
		r.txnCatchUp = true
	}
}
