// Package dlq reads the dead-letter topic (kafka.topics.dlq) to its
// committed end, summarises its letters, and re-drives chosen ones to their
// source topics in one Kafka transaction (`roomflow dlq`).
package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/sinks/mysql/retention"
)

// Letter is one record of the DLQ topic: its position and timestamp (when
// it was dead-lettered), the parsed letter (Err set when it is not one)
// and whether an earlier letter had its origin (a repeat).
type Letter struct {
	Partition int32
	Offset    int64
	Time      time.Time
	Letter    envelope.Letter
	Err       error
	Repeat    bool
}

// readDLQ reads kafka.topics.dlq from every partition's start to its
// committed end and marks the repeats. Only the letters keep (nil: none)
// chooses keep their key, value and headers, so a large DLQ is summarised
// in little memory.
func Read(ctx context.Context, cfg *config.Config, idle time.Duration, keep func(Letter) bool) ([]Letter, error) {
	var out []Letter
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
		return cfg.Kafka.Cluster(nil, nil).NewClient("dlq", opts...)
	}
	err := kafkax.ReadCommitted(ctx, newClient, nil, idle, kafkax.DataRecords(func(r *kgo.Record) (bool, error) {
		l, err := envelope.ParseDeadLetter(r)
		d := Letter{Partition: r.Partition, Offset: r.Offset, Time: r.Timestamp, Letter: l, Err: err}
		if keep == nil || !keep(d) {
			d.Letter.Key, d.Letter.Value, d.Letter.Headers, d.Letter.Extra = nil, nil, nil, nil
		}
		out = append(out, d)
		return false, nil
	}), cfg.Kafka.Topics.DLQ)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Letter) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	seen := map[envelope.Origin]bool{}
	for i := range out {
		if o, ok := out[i].Letter.Origin(); ok && out[i].Err == nil {
			out[i].Repeat = seen[o]
			seen[o] = true
		}
	}
	return out, nil
}

// Group is one line of `dlq list`.
type Group struct {
	Stage, Reason, SourceTopic string
	Records, Repeats           int
	Offsets                    map[int32][2]int64 // DLQ partition: first, last offset
}

func Summarise(letters []Letter) []*Group {
	groups := map[[3]string]*Group{}
	for _, d := range letters {
		k := [3]string{d.Letter.Stage, d.Letter.Reason, d.Letter.SourceTopic}
		if d.Err != nil {
			k = [3]string{"-", "not_a_dead_letter", ""}
		}
		g := groups[k]
		if g == nil {
			g = &Group{Stage: k[0], Reason: k[1], SourceTopic: k[2], Offsets: map[int32][2]int64{}}
			groups[k] = g
		}
		if d.Repeat {
			g.Repeats++
		} else {
			g.Records++
		}
		r, ok := g.Offsets[d.Partition]
		if !ok {
			r[0] = d.Offset
		}
		r[1] = d.Offset
		g.Offsets[d.Partition] = r
	}
	out := slices.Collect(maps.Values(groups))
	slices.SortFunc(out, func(a, b *Group) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.SourceTopic, b.SourceTopic))
	})
	return out
}

func Print(w io.Writer, groups []*Group) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tERROR_REASON\tSOURCE_TOPIC\tRECORDS\tREPEATS\tDLQ_OFFSETS")
	var records, repeats int
	for _, g := range groups {
		var offs []string
		for _, p := range slices.Sorted(maps.Keys(g.Offsets)) {
			r := g.Offsets[p]
			if r[0] == r[1] {
				offs = append(offs, fmt.Sprintf("%d:%d", p, r[0]))
			} else {
				offs = append(offs, fmt.Sprintf("%d:%d-%d", p, r[0], r[1]))
			}
		}
		src := g.SourceTopic
		if src == "" {
			src = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", g.Stage, g.Reason, src, g.Records, g.Repeats, strings.Join(offs, ","))
		records += g.Records
		repeats += g.Repeats
	}
	tw.Flush()
	fmt.Fprintf(w, "%d dead letters (%d repeats) in %d groups\n", records, repeats, len(groups))
}

// parseOffsetRanges parses --offsets; nil when empty.
func parseOffsetRanges(s string) (map[int32][][2]int64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[int32][][2]int64{}
	for _, part := range strings.Split(s, ",") {
		p, rng, ok := strings.Cut(strings.TrimSpace(part), ":")
		first, last, isRange := strings.Cut(rng, "-")
		pn, perr := strconv.ParseInt(p, 10, 32)
		a, aerr := strconv.ParseInt(first, 10, 64)
		b := a
		var berr error
		if isRange {
			b, berr = strconv.ParseInt(last, 10, 64)
		}
		if !ok || perr != nil || aerr != nil || berr != nil || pn < 0 || a < 0 || b < a {
			return nil, cfgerr.Usage(fmt.Errorf("dlq redrive: --offsets: %q is not partition:offset or partition:first-last", part))
		}
		out[int32(pn)] = append(out[int32(pn)], [2]int64{a, b})
	}
	return out, nil
}

// chosen reports whether o selects d. A record that is no dead letter
// matches no filter but may be named by --offsets (or --all): redrive
// then refuses it.
func (o RedriveOptions) chosen(d Letter) bool {
	l := d.Letter
	if (o.Stage != "" && l.Stage != o.Stage) || (o.Reason != "" && l.Reason != o.Reason) || (o.SourceTopic != "" && l.SourceTopic != o.SourceTopic) {
		return false
	}
	if o.selected == nil {
		return true
	}
	for _, r := range o.selected[d.Partition] {
		if d.Offset >= r[0] && d.Offset <= r[1] {
			return true
		}
	}
	return false
}

// RedriveOptions choose the letters Redrive sends: the flags of `dlq
// redrive`. Stage, Reason and SourceTopic, when set, must all match.
type RedriveOptions struct {
	// Offsets are DLQ positions: partition:offset or partition:first-last,
	// comma separated; empty chooses by the filters alone.
	Offsets                    string
	Stage, Reason, SourceTopic string
	// All chooses every letter, when nothing else chooses.
	All bool
	// DryRun lists what would be sent and sends nothing.
	DryRun bool
	// SkipRefused sends the chosen letters that can be sent even when
	// others cannot.
	SkipRefused bool
	// PastWindow sends letters dead-lettered longer ago than the purge.*
	// window of a table their source topic feeds (refused otherwise).
	PastWindow bool
	// TransactionalID is the producer's; empty: <kafka.client_id>-dlq-redrive.
	TransactionalID string
	selected        map[int32][][2]int64 // parsed Offsets; nil: any
}

// List reads the DLQ (giving up after idle without a record before its
// end) and prints its letters counted by stage, error_reason and source
// topic to w.
func List(ctx context.Context, cfg *config.Config, idle time.Duration, w io.Writer) error {
	letters, err := Read(ctx, cfg, idle, nil)
	if err != nil {
		return err
	}
	Print(w, Summarise(letters))
	return nil
}

// Redrive reads the DLQ and sends the letters o chooses back to their
// source topics in one transaction, listing each on w. It fails, sending
// nothing, on a choice that names no letters (a usage error), a chosen
// letter that cannot be sent (without SkipRefused), or a Kafka error.
func Redrive(ctx context.Context, cfg *config.Config, idle time.Duration, o RedriveOptions, w io.Writer) error {
	var err error
	if o.selected, err = parseOffsetRanges(o.Offsets); err != nil {
		return err
	}
	if o.selected == nil && o.Stage == "" && o.Reason == "" && o.SourceTopic == "" && !o.All {
		return cfgerr.Usage(errors.New("dlq redrive: choose letters with --offsets, --stage, --reason or --source-topic, or every letter with --all"))
	}
	if o.TransactionalID == "" {
		o.TransactionalID = cfg.Kafka.ClientID + "-dlq-redrive"
	}
	letters, err := Read(ctx, cfg, idle, o.chosen)
	if err != nil {
		return err
	}
	return redrive(ctx, cfg, letters, o, w)
}

// redrive sends the chosen letters' records in one transaction.
func redrive(ctx context.Context, cfg *config.Config, letters []Letter, o RedriveOptions, w io.Writer) error {
	var recs []*kgo.Record
	var refused, repeats int
	// A repeat is one of the chosen letters, so choosing only the second
	// copy of a refused record still sends it.
	sent := map[envelope.Origin]bool{}
	windows := purgeWindows(cfg)
	now := time.Now()
	chosen := 0
	for _, d := range letters {
		if !o.chosen(d) {
			continue
		}
		chosen++
		if origin, ok := d.Letter.Origin(); ok && d.Err == nil {
			if sent[origin] {
				repeats++
				continue
			}
			sent[origin] = true
		}
		rec, err := d.Letter.Redrive()
		if d.Err != nil {
			err = d.Err
		} else if err == nil && rec.Topic == cfg.Kafka.Topics.DLQ {
			err = &envelope.RedriveError{Reason: "its source topic is the DLQ itself"}
		} else if err == nil && !o.PastWindow && !d.Time.IsZero() {
			if w, ok := windows[rec.Topic]; ok && now.Sub(d.Time) > w.age {
				err = &envelope.RedriveError{Reason: fmt.Sprintf("dead-lettered %s ago, longer than %s (%s): if its event was applied (a redrive before), "+
					"purge may have deleted its consumption row and it would count twice (--past-window sends it)", now.Sub(d.Time).Round(time.Hour), w.key, w.age)}
			}
		}
		if err != nil {
			refused++
			fmt.Fprintf(w, "refused %d:%d (%s %s): %v\n", d.Partition, d.Offset, d.Letter.Stage, d.Letter.Reason, err)
			continue
		}
		verb := "send"
		if o.DryRun {
			verb = "would send"
		}
		fmt.Fprintf(w, "%s %d:%d (%s %s) -> %s key %q event_id %s\n", verb, d.Partition, d.Offset, d.Letter.Stage, d.Letter.Reason,
			rec.Topic, rec.Key, envelope.Header(rec, envelope.HeaderEventID))
		recs = append(recs, rec)
	}
	// A mistyped filter or offsets past the end must not read as a
	// successful redrive; --all alone on an empty DLQ has nothing to do.
	if chosen == 0 && (o.selected != nil || o.Stage != "" || o.Reason != "" || o.SourceTopic != "") {
		return cfgerr.Usage(errors.New("dlq redrive: the selection chooses no dead letter (`dlq list` shows the stages, error_reasons, source topics and offsets)"))
	}
	if refused > 0 && !o.SkipRefused {
		return fmt.Errorf("dlq redrive: %d chosen letters cannot be sent (listed above); nothing was sent (--skip-refused sends the other %d)", refused, len(recs))
	}
	if o.DryRun || len(recs) == 0 {
		fmt.Fprintf(w, "%d records would be sent (%d repeats skipped, %d refused); nothing sent\n", len(recs), repeats, refused)
		return nil
	}
	if err := produceInTransaction(ctx, cfg, o.TransactionalID, recs); err != nil {
		return err
	}
	fmt.Fprintf(w, "sent %d records in one transaction (%d repeats skipped, %d refused)\n", len(recs), repeats, refused)
	return nil
}

// purgeWindow is the shortest purge.* window (key, age) of the
// consumption tables a topic feeds.
type purgeWindow struct {
	key string
	age time.Duration
}

// purgeWindows maps each topic whose records end in a purged consumption
// table to the shortest such window: a re-driven record whose event was
// applied longer ago may find its consumption row gone.
func purgeWindows(cfg *config.Config) map[string]purgeWindow {
	ages := map[string]time.Duration{
		retention.UserMicEventConsumption:    cfg.Purge.UserMicEventConsumption.D(),
		retention.LuckyPoolInflowConsumption: cfg.Purge.LuckyPoolInflowConsumption.D(),
		retention.LuckyEventConsumption:      cfg.Purge.LuckyEventConsumption.D(),
	}
	out := map[string]purgeWindow{}
	for table, topics := range retention.ReplayTopics(cfg.Kafka.Topics) {
		w := purgeWindow{key: "purge." + table, age: ages[table]}
		if w.age <= 0 {
			continue
		}
		for _, t := range topics {
			if cur, ok := out[t]; !ok || w.age < cur.age || w.age == cur.age && w.key < cur.key {
				out[t] = w
			}
		}
	}
	return out
}

// produceInTransaction produces recs in one transaction of transactionalID
// and commits it; on any error it aborts, so none is visible to
// read_committed consumers.
func produceInTransaction(ctx context.Context, cfg *config.Config, transactionalID string, recs []*kgo.Record) error {
	// A letter holds a record as large as the relay or a processor wrote it.
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("dlq-redrive", kgo.TransactionalID(transactionalID),
		kafkax.BatchBytes(cfg.Relay.MaxRecordBytes))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("dlq redrive: begin transaction: %w", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = cl.AbortBufferedRecords(actx)
		_ = cl.EndTransaction(actx, kgo.TryAbort)
		return fmt.Errorf("dlq redrive: produce: %w (the transaction was aborted: nothing sent)", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("dlq redrive: commit: %w", err)
	}
	return nil
}
