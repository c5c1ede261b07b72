package streams

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/schemas/envelope"
)

// stallTracker keeps the partitions that back off alone after their
// record or punctuation failed with a non-reject error (a failing lookup,
// a bug), and the roomflow_process_partition_stalled gauge of every owned
// partition. It pauses a stalled record's partition in the client and sets
// its position back, and resumes it once the backoff has passed.
type stallTracker struct {
	sh *shared
	by map[int32]*stall // stalled partitions
}

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
func (s *stall) waiting() bool { return s != nil && !s.until.IsZero() }

// fetchPaused reports whether the partition's fetching is paused.
func (s *stall) fetchPaused() bool { return s != nil && s.offset >= 0 && s.waiting() }

// recoversAt reports whether processing the record at offset ends the
// stall: it is the failed record, or a later one.
func (s *stall) recoversAt(offset int64) bool { return s != nil && s.offset >= 0 && offset >= s.offset }

func (st *stallTracker) init(sh *shared) {
	st.sh = sh
	st.by = map[int32]*stall{}
}

// of is partition p's stall, nil when it runs normally.
func (st *stallTracker) of(p int32) *stall { return st.by[p] }

// waiting reports whether p's backoff runs.
func (st *stallTracker) waiting(p int32) bool { return st.by[p].waiting() }

// track shows an owned partition's stall gauge at 0 (forget deletes it).
func (st *stallTracker) track(p int32) {
	st.sh.m.stalled.WithLabelValues(st.sh.name, strconv.FormatInt(int64(p), 10)).Set(0)
}

// record stalls t's partition at rec, which failed with err.
func (st *stallTracker) record(t *task, rec *kgo.Record, err error) {
	st.setBack(t.partition, rec)
	s := st.backOff(t.partition, rec.Offset, "", "record")
	t.log.Error("record failed; its partition stalls and retries it alone after a backoff",
		"offset", rec.Offset, "event_id", string(envelope.Header(rec, envelope.HeaderEventID)), "event_type", string(envelope.Header(rec, envelope.HeaderEventType)),
		"error", err, "attempt", s.attempt, "backoff", s.backoff.String())
}

// setBack pauses partition p and sets its consume (and commit) position
// to rec: rec and the records polled after it are fetched again once the
// partition resumes.
func (st *stallTracker) setBack(p int32, rec *kgo.Record) {
	cl := st.sh.client()
	// Pause before setting the offset: SetOffsets restarts fetching, and
	// a paused partition's buffered records are never returned by a poll.
	cl.PauseFetchPartitions(map[string][]int32{st.sh.cfg.Input: {p}})
	cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{st.sh.cfg.Input: {p: {Epoch: rec.LeaderEpoch, Offset: rec.Offset}}})
}

// punctuation holds t's punctuations back after name failed; they run
// again once the backoff has passed and the task has caught up.
func (st *stallTracker) punctuation(t *task, name string, err error) {
	s := st.backOff(t.partition, -1, name, "punctuation")
	t.log.Error("punctuation failed; it is retried after a backoff",
		"punctuation", name, "error", err, "attempt", s.attempt, "backoff", s.backoff.String())
}

// backOff records a failed attempt of partition p: the backoff doubles
// (from RetryBackoffMin to RetryBackoffMax) while the same record or
// punctuation keeps failing.
func (st *stallTracker) backOff(p int32, offset int64, punct, cause string) *stall {
	s := st.by[p]
	if s == nil || s.offset != offset || s.punct != punct {
		s = &stall{offset: offset, punct: punct, backoff: st.sh.cfg.RetryBackoffMin}
		st.by[p] = s
	} else {
		s.backoff = min(s.backoff*2, st.sh.cfg.RetryBackoffMax)
	}
	s.attempt++
	s.until = time.Now().Add(retryJitter.Jitter(s.backoff))
	st.sh.m.stalled.WithLabelValues(st.sh.name, strconv.FormatInt(int64(p), 10)).Set(1)
	st.sh.m.stalls.WithLabelValues(st.sh.name, cause).Inc()
	return s
}

// resume ends the backoffs that have passed, resuming the fetching of
// stalled partitions, and returns how long until the next one ends (0:
// none waits).
func (st *stallTracker) resume() time.Duration {
	now := time.Now()
	var resume []int32
	var next time.Duration
	for p, s := range st.by {
		if !s.waiting() {
			continue
		}
		if wait := s.until.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if s.fetchPaused() {
			resume = append(resume, p)
		}
		s.until = time.Time{}
	}
	if len(resume) > 0 {
		st.sh.client().ResumeFetchPartitions(map[string][]int32{st.sh.cfg.Input: resume})
	}
	return next
}

// recovered ends t's stall once what failed has succeeded.
func (st *stallTracker) recovered(t *task) {
	s := st.by[t.partition]
	t.log.Info("stalled partition recovered", "offset", s.offset, "punctuation", s.punct, "attempts", s.attempt)
	delete(st.by, t.partition)
	st.sh.m.stalled.WithLabelValues(st.sh.name, strconv.FormatInt(int64(t.partition), 10)).Set(0)
}

// punctuationRan ends t's stall if it is the punctuation name's, which
// has now succeeded.
func (st *stallTracker) punctuationRan(t *task, name string) {
	if s := st.by[t.partition]; s != nil && s.punct == name {
		st.recovered(t)
	}
}

// forget drops p's stall when its task is dropped: a paused partition
// stays paused in the client across rebalances, so a later assignment of
// it would never fetch.
func (st *stallTracker) forget(p int32) {
	if st.by[p].fetchPaused() {
		st.sh.client().ResumeFetchPartitions(map[string][]int32{st.sh.cfg.Input: {p}})
	}
	delete(st.by, p)
	st.sh.m.stalled.DeleteLabelValues(st.sh.name, strconv.FormatInt(int64(p), 10))
}
