package streams

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// stall is a partition backing off alone after its record or punctuation
// failed with a non-reject error (a failing lookup, a bug). The other
// partitions keep processing and committing in the shared transaction.
//
// A failing punctuation is undone and retried after the backoff; the
// partition's records keep flowing meanwhile.
//
// A failing record is undone (its emits and store writes discarded), its
// partition's fetching is paused and its consume position set back to the
// record with SetOffsets. SetOffsets also sets the offset the
// GroupTransactSession commits for the partition: the open transaction
// commits the partition exactly up to the records processed before the
// failing one, never past it, and the records polled after it are
// refetched, not committed. After the backoff the partition resumes from
// the failing record (with the client's next fetch from its broker, which
// an idle broker answers only after the fetch max wait).
type stall struct {
	offset  int64         // the failing record's offset; -1 for a punctuation
	punct   string        // the failing punctuation's name, if any
	attempt int           // consecutive failures at offset (or of punct)
	backoff time.Duration // current backoff
	until   time.Time     // real time of the next attempt; zero once it is due
}

// waiting reports whether the backoff runs: no punctuation round opens.
func (s *stall) waiting() bool { return !s.until.IsZero() }

// fetchPaused reports whether the partition's fetching is paused.
func (s *stall) fetchPaused() bool { return s.offset >= 0 && s.waiting() }

// stallRecord stalls t's partition at rec, which failed with err.
func (r *Runtime) stallRecord(t *task, rec *kgo.Record, err error) {
	r.setBack(t, rec)
	s := r.backOff(t, rec.Offset, "", "record")
	t.log.Error("record failed; its partition stalls and retries it alone after a backoff",
		"offset", rec.Offset, "event_id", string(envelope.Header(rec, envelope.HeaderEventID)), "event_type", string(envelope.Header(rec, envelope.HeaderEventType)),
		"error", err, "attempt", s.attempt, "backoff", s.backoff.String())
}

// setBack pauses t's partition and sets its consume (and commit) position
// to rec: rec and the records polled after it are fetched again once the
// partition resumes.
func (r *Runtime) setBack(t *task, rec *kgo.Record) {
	cl := r.sess.Client()
	// Pause before setting the offset: SetOffsets restarts fetching, and
	// a paused partition's buffered records are never returned by a poll.
	cl.PauseFetchPartitions(map[string][]int32{r.cfg.Input: {t.partition}})
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.cfg.Input: {t.partition: {Epoch: rec.LeaderEpoch, Offset: rec.Offset}}})
}

// stallPunctuation holds t's punctuations back after name failed; they
// run again once the backoff has passed and the task has caught up.
func (r *Runtime) stallPunctuation(t *task, name string, err error) {
	s := r.backOff(t, -1, name, "punctuation")
	t.log.Error("punctuation failed; it is retried after a backoff",
		"punctuation", name, "error", err, "attempt", s.attempt, "backoff", s.backoff.String())
}

// backOff records a failed attempt: the backoff doubles (from RetryBackoffMin.s
// minimum to its maximum) while the same record or punctuation keeps failing.
func (r *Runtime) backOff(t *task, offset int64, punct, cause string) *stall {
	s := t.stall
	if s == nil || s.offset != offset || s.punct != punct {
		s = &stall{offset: offset, punct: punct, backoff: r.cfg.RetryBackoffMin}
		t.stall = s
	} else {
		s.backoff = min(s.backoff*2, r.cfg.RetryBackoffMax)
	}
	s.attempt++
	s.until = time.Now().Add(retryJitter.Jitter(s.backoff))
	r.m.stalled.WithLabelValues(r.name, strconv.FormatInt(int64(t.partition), 10)).Set(1)
	r.m.stalls.WithLabelValues(r.name, cause).Inc()
	return s
}

// resumeStalled ends the backoffs that have passed, resuming the fetching
// of stalled partitions, and returns how long until the next one ends (0:
// none waits).
func (r *Runtime) resumeStalled() time.Duration {
	now := time.Now()
	var resume []int32
	var next time.Duration
	for p, t := range r.tasks {
		if t.stall == nil || !t.stall.waiting() {
			continue
		}
		if wait := t.stall.until.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if t.stall.fetchPaused() {
			resume = append(resume, p)
		}
		t.stall.until = time.Time{}
	}
	if len(resume) > 0 {
		r.sess.Client().ResumeFetchPartitions(map[string][]int32{r.cfg.Input: resume})
	}
	return next
}

// recovered ends t's stall once what failed has succeeded.
func (r *Runtime) recovered(t *task) {
	t.log.Info("stalled partition recovered", "offset", t.stall.offset, "punctuation", t.stall.punct, "attempts", t.stall.attempt)
	t.stall = nil
	r.m.stalled.WithLabelValues(r.name, strconv.FormatInt(int64(t.partition), 10)).Set(0)
}

// unstall forgets t's stall when its task is dropped: a paused partition
// stays paused in the client across rebalances, so a later assignment of
// it would never fetch.
func (r *Runtime) unstall(t *task) {
	if t.stall != nil && t.stall.fetchPaused() {
		r.sess.Client().ResumeFetchPartitions(map[string][]int32{r.cfg.Input: {t.partition}})
	}
	t.stall = nil
	r.m.stalled.DeleteLabelValues(r.name, strconv.FormatInt(int64(t.partition), 10))
}
