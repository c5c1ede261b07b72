package runtime

import (
	"context"
	"errors"
	"time"
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
type punctRound struct {
	at       time.Time // runtime clock at the tick: the punctuations' now
	lso      int64     // the input partition's last stable offset at the tick
	deferred bool      // already counted as deferred
}

const (
	// lsoTimeout bounds the LSO read, which holds up processing.
	lsoTimeout = 5 * time.Second
	// lsoRetry is the wait after a failed LSO read: the tick is skipped,
	// never run blind.
	lsoRetry = 500 * time.Millisecond
)

// punctuate opens a round for every task with a due punctuation, runs the
// rounds of the tasks that caught up with their input, and sweeps expired
// store keys. A failing punctuation stalls its partition (stallPunctuation).
func (r *Runtime) punctuate() {
	if len(r.tasks) == 0 {
		return
	}
	now := r.o.clock()
	r.openRounds(now)
	var pos map[int32]int64
	for _, t := range r.tasks {
		if t.round != nil && (t.stall == nil || !t.stall.paused()) {
			if pos == nil {
				pos = r.positions()
			}
			if pos[t.partition] >= t.round.lso {
				at := t.round.at
				t.round = nil
				r.runPunctuations(t, at)
			} else if !t.round.deferred {
				t.round.deferred = true
				r.m.deferred.WithLabelValues(r.name, "behind").Inc()
			}
		}
		if t.store != nil && !now.Before(t.nextSweep) {
			t.nextSweep = now.Add(r.o.ttlSweep)
			if t.store.sweepExpired(now) > 0 {
				r.markContent()
			}
		}
	}
}

// openRounds reads the LSOs of the input partitions (one request for every
// task) when a task without a round has a punctuation due at now, and
// opens those tasks' rounds.
func (r *Runtime) openRounds(now time.Time) {
	var due []*Task
	for _, t := range r.tasks {
		if t.round != nil || t.stall != nil && t.stall.paused() {
			continue
		}
		for i := range r.o.punctuations {
			if !now.Before(t.nextPunct[i]) {
				due = append(due, t)
				break
			}
		}
	}
	if len(due) == 0 || time.Now().Before(r.lsoRetryAt) {
		return
	}
	ctx, cancel := context.WithTimeout(r.runCtx, lsoTimeout)
	lsos, err := r.adm.ListCommittedOffsets(ctx, r.o.input) // read_committed: the LSO
	cancel()
	failed := 0
	for _, t := range due {
		lo, ok := lsos.Lookup(r.o.input, t.partition)
		switch {
		case ok && lo.Err == nil:
			t.round = &punctRound{at: now, lso: lo.Offset}
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
	r.lsoRetryAt = time.Now().Add(lsoRetry)
	r.m.deferred.WithLabelValues(r.name, "lso_unavailable").Add(float64(failed))
	if r.runCtx.Err() == nil && !r.killed.Load() {
		r.log.Warn("cannot read the input's last stable offsets; punctuations wait", "topic", r.o.input,
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
	for p, eo := range cl.CommittedOffsets()[r.o.input] {
		pos[p] = eo.Offset
	}
	for p, eo := range cl.UncommittedOffsets()[r.o.input] {
		pos[p] = eo.Offset
	}
	return pos
}

// runPunctuations runs t's punctuations due at at, with at as their now.
func (r *Runtime) runPunctuations(t *Task, at time.Time) {
	for i, p := range r.o.punctuations {
		if at.Before(t.nextPunct[i]) {
			continue
		}
		r.markContent()
		t.emits = t.emits[:0]
		if t.store != nil {
			t.store.beginRecord()
		}
		if err := p.fn(t, at); err != nil {
			if t.store != nil {
				t.store.rejectRecord()
			}
			clear(t.emits)
			t.emits = t.emits[:0]
			r.stallPunctuation(t, p.name, err)
			return
		}
		if t.store != nil {
			t.store.endRecord()
		}
		r.produceEmits(t)
		r.txnPunct[p.name]++
		// Next run one interval after this one, skipping missed runs.
		next := t.nextPunct[i].Add(p.interval)
		if !next.After(at) {
			next = at.Add(p.interval)
		}
		t.nextPunct[i] = next
		if t.stall != nil && t.stall.punct == p.name {
			r.recovered(t)
		}
	}
}
