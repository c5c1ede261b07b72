package relay

import (
	"context"
	"slices"
	"time"

	"github.com/hyapp/roomflow/internal/backoff"
)

// probeLimit bounds the hole ids one probe looks up (see Tracker.ProbeIDs).
const probeLimit = 4 * maxInList

// reissueCheckEvery is how often the relay compares the table's
// AUTO_INCREMENT with its high-water id (at least every poll interval).
const reissueCheckEvery = time.Second

// read produces batches from MySQL into out until ctx ends or a read fails.
//
// A batch scans above the high-water id, then looks up open holes: all of
// them (a bounded rotation when many are open) once per poll interval,
// and the youngest maxInList in every other batch that scanned rows. Both
// reads bring sizes and only small payloads inline (each at most half of
// MaxBatchBytes in all); the batch then takes filled holes first
// and scanned rows after them within the MaxBatchBytes budget (see
// Budget) and loads just their larger payloads. A batch so reads at most
// max_batch_bytes, or one larger row alone besides its inline reads.
//
// The order keeps each room's order: a row that fills a hole committed
// before any later row of its room was even inserted, so it must not be
// relayed after a row the same or a later scan found. Hence the scan reads
// before the hole lookup, a batch with scanned rows looks holes up, and
// when the budget leaves found holes behind, the batch takes no scanned
// row and the next batch looks those holes up first. With more than
// maxInList holes open, an older hole's row can still come after a later
// row of its room, by up to one rotation. Reading runs one batch ahead of
// the commit, so up to three batches' bytes are held at once (reading,
// queued, committing).
func (r *Relay) read(ctx context.Context, tr *Tracker, out chan<- *batch) error {
	p := &pollReader{r: r, tr: tr}
	for {
		b, more, err := p.next(ctx)
		if err != nil {
			return err
		}
		if b != nil {
			if err := r.send(ctx, out, b); err != nil {
				return err
			}
		}
		if b == nil || !more {
			if err := backoff.Sleep(ctx, r.cfg.PollInterval); err != nil {
				return err
			}
		}
	}
}

// pollReader is what poll mode's read keeps between batches: when it
// last probed every open hole and last checked AUTO_INCREMENT, and the
// found holes the last budget left behind.
type pollReader struct {
	r                           *Relay
	tr                          *Tracker
	lastProbe, lastReissueCheck time.Time
	pending                     []uint64
}

// next reads the next batch; nil when there is nothing to relay (no row,
// no gap given up, the high-water id unchanged). more reports that rows
// were left for the next batch: read again at once.
func (p *pollReader) next(ctx context.Context) (b *batch, more bool, err error) {
	r, tr := p.r, p.tr
	started := r.cfg.Now()
	scanned, err := r.src.After(ctx, tr.High(), r.cfg.BatchSize, r.cfg.MaxBatchBytes/2/r.cfg.BatchSize)
	if err != nil {
		return nil, false, err
	}
	more = len(scanned) == r.cfg.BatchSize
	filled, err := p.lookUpHoles(ctx, started, len(scanned) > 0)
	if err != nil {
		return nil, false, err
	}
	inline := PayloadBytes(filled) + PayloadBytes(scanned)
	filled, scanned, cut := p.fit(filled, scanned, inline)
	more = more || cut
	rows := append(append([]Row(nil), filled...), scanned...)
	fetched, err := r.src.LoadPayloads(ctx, rows, r.tooLarge)
	if err != nil {
		return nil, false, err
	}
	tr.Fill(appendRowIDs(nil, filled))
	before := tr.High()
	abandoned, err := tr.Advance(appendRowIDs(nil, scanned), started)
	if err != nil {
		return nil, false, err
	}
	// The found holes the budget left behind are rows the relay has read:
	// they wait for the next batch, however old their ids are.
	abandoned = append(abandoned, tr.Expire(started, p.pending...)...)
	if err := p.checkReissue(ctx, started); err != nil {
		return nil, false, err
	}
	if len(rows) == 0 && len(abandoned) == 0 && tr.High() == before {
		return nil, false, nil
	}
	return newBatch(tr, rows, abandoned, started, inline+fetched), more, nil
}

// lookUpHoles reads the rows of the holes this batch looks up: those the
// last budget left behind, and every open hole (a bounded rotation when
// many are open) once per poll interval, else the youngest maxInList when
// the scan found rows.
func (p *pollReader) lookUpHoles(ctx context.Context, started time.Time, scannedRows bool) ([]Row, error) {
	r, tr := p.r, p.tr
	probe := p.pending
	switch {
	case tr.OpenHoles() == 0:
	case started.Sub(p.lastProbe) >= r.cfg.PollInterval:
		probe = append(probe, tr.ProbeIDs(probeLimit)...)
		p.lastProbe = started
	case scannedRows:
		// A hole's row that committed before a later row of its room
		// (in this scan) was even inserted must not come after it.
		probe = append(probe, tr.Youngest(maxInList)...)
	}
	if len(probe) == 0 {
		return nil, nil
	}
	slices.Sort(probe)
	probe = slices.Compact(probe)
	return r.src.ByIDs(ctx, probe, r.cfg.MaxBatchBytes/2/len(probe))
}

// fit cuts the batch to the MaxBatchBytes budget: filled holes first, and
// scanned rows only when all of those fit. Found holes it leaves behind
// are looked up first by the next batch; they stay open holes until then
// (Expire keeps them, and the batch that leaves them scans nothing, so it
// evicts no hole). cut reports that it left rows.
func (p *pollReader) fit(filled, scanned []Row, inline int) (_, _ []Row, cut bool) {
	budget := &Budget{Max: p.r.cfg.MaxBatchBytes, Used: inline, Skip: p.r.tooLarge}
	p.pending = nil
	if n := budget.Fit(filled); n < len(filled) {
		p.pending = appendRowIDs(nil, filled[n:])
		return filled[:n], nil, true
	}
	if n := budget.Fit(scanned); n < len(scanned) {
		return filled, scanned[:n], true
	}
	return filled, scanned, false
}

// checkReissue compares AUTO_INCREMENT with the high-water id on a clock,
// not only when idle: reissued ids are invisible to the scan (they are not
// above High), and would pass for filled holes.
func (p *pollReader) checkReissue(ctx context.Context, started time.Time) error {
	if started.Sub(p.lastReissueCheck) < max(p.r.cfg.PollInterval, reissueCheckEvery) {
		return nil
	}
	if err := p.r.checkReissue(ctx, p.tr.High()); err != nil {
		return err
	}
	p.lastReissueCheck = started
	return nil
}
