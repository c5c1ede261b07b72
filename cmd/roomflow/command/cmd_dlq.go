package command

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

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/cfgerr"
	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/schemas/envelope"
)

func dlqCmd(g *globals) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Summarise the dead-letter topic and re-drive fixed records to their source topics",
		Long: `dlq works on kafka.topics.dlq, read with read_committed from its start to
its committed end at the call. 'dlq list' counts the dead letters by stage,
error_reason and source topic with their DLQ offsets; 'dlq redrive' sends
chosen ones back to their source topics in one Kafka transaction. A record
the MySQL sink dead-lettered twice (a batch that never committed) is one
record: letters are told apart by source_topic, source_partition,
source_offset (the relay's by source and source_id). 'roomflow peek dlq'
shows each letter with its headers.`,
	}
	cmd.PersistentFlags().DurationVar(&idle, "idle", 5*time.Second, "stop reading when nothing arrived for this long before the end was reached")
	cmd.AddCommand(dlqListCmd(g, &idle), dlqRedriveCmd(g, &idle))
	return cmd
}

func dlqListCmd(g *globals, idle *time.Duration) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "Count dead letters by stage, error_reason and source topic, with their DLQ offsets",
		Long: `list reads every dead letter and prints one line per stage, error_reason
and source topic: the records refused (repeats of one refused record
counted once), the repeats, and the DLQ offsets as partition:first-last.
Records on the topic that are not dead letters are counted as stage "-",
reason not_a_dead_letter.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			letters, err := readDLQ(cmd.Context(), cfg, *idle, nil)
			if err != nil {
				return err
			}
			printDLQ(cmd.OutOrStdout(), summariseDLQ(letters))
			return nil
		},
	}
}

// dlqLetter is one record of the DLQ topic: its position, the parsed
// letter (Err set when it is not one) and whether an earlier letter had
// its origin (a repeat).
type dlqLetter struct {
	Partition int32
	Offset    int64
	Letter    envelope.Letter
	Err       error
	Repeat    bool
}

// readDLQ reads kafka.topics.dlq from every partition's start to its
// committed end and marks the repeats. Only the letters keep (nil: none)
// chooses keep their key, value and headers, so a large DLQ is summarised
// in little memory.
func readDLQ(ctx context.Context, cfg *config.Config, idle time.Duration, keep func(dlqLetter) bool) ([]dlqLetter, error) {
	var out []dlqLetter
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
		return cfg.Kafka.Cluster(nil, nil).NewClient("dlq", opts...)
	}
	err := kafkax.ReadCommitted(ctx, newClient, nil, idle, kafkax.DataRecords(func(r *kgo.Record) (bool, error) {
		l, err := envelope.ParseDeadLetter(r)
		d := dlqLetter{Partition: r.Partition, Offset: r.Offset, Letter: l, Err: err}
		if keep == nil || !keep(d) {
			d.Letter.Key, d.Letter.Value, d.Letter.Headers, d.Letter.Extra = nil, nil, nil, nil
		}
		out = append(out, d)
		return false, nil
	}), cfg.Kafka.Topics.DLQ)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b dlqLetter) int {
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

// dlqGroup is one line of `dlq list`.
type dlqGroup struct {
	Stage, Reason, SourceTopic string
	Records, Repeats           int
	Offsets                    map[int32][2]int64 // DLQ partition: first, last offset
}

func summariseDLQ(letters []dlqLetter) []*dlqGroup {
	groups := map[[3]string]*dlqGroup{}
	for _, d := range letters {
		k := [3]string{d.Letter.Stage, d.Letter.Reason, d.Letter.SourceTopic}
		if d.Err != nil {
			k = [3]string{"-", "not_a_dead_letter", ""}
		}
		g := groups[k]
		if g == nil {
			g = &dlqGroup{Stage: k[0], Reason: k[1], SourceTopic: k[2], Offsets: map[int32][2]int64{}}
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
	slices.SortFunc(out, func(a, b *dlqGroup) int {
		return cmp.Or(cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.SourceTopic, b.SourceTopic))
	})
	return out
}

func printDLQ(w io.Writer, groups []*dlqGroup) {
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

// redriveOpts are the flags of `dlq redrive`.
type redriveOpts struct {
	offsets                    string
	stage, reason, sourceTopic string
	all, dryRun, skipRefused   bool
	transactionalID            string
	selected                   map[int32][][2]int64 // parsed --offsets; nil: any
}

func dlqRedriveCmd(g *globals, idle *time.Duration) *cobra.Command {
	var o redriveOpts
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Send chosen dead letters back to their source topics in one Kafka transaction",
		Long: `redrive sends the dead letters chosen by --offsets (DLQ partition:offset or
partition:first-last, comma separated) and the filters --stage, --reason
and --source-topic (all given must match; --all chooses every letter) back
to their source topics: the refused record's key, value and own headers
(event_id, event_type, app_code, ...; no dead-letter header), partitioned
by key as every roomflow producer does, all in one Kafka transaction (a
failure sends none). A repeat of a letter already chosen is sent once.

A letter without a value (the relay keeps none for a payload too large for
the topic, an empty payload is no event) or without a source topic (a
gap_abandoned run of ids) cannot be sent: redrive lists them with the
reason and sends nothing, unless --skip-refused sends the others.
--dry-run lists what would be sent.

Fix the cause first (deploy the fix, or correct the record's source): a
record refused again is dead-lettered again. Every stage dedupes by
event_id, so a letter whose event was applied after all changes nothing,
as long as it is re-driven within the purge.* windows (README, Operations:
Retention).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if o.selected, err = parseOffsetRanges(o.offsets); err != nil {
				return err
			}
			if o.selected == nil && o.stage == "" && o.reason == "" && o.sourceTopic == "" && !o.all {
				return cfgerr.Usage(errors.New("dlq redrive: choose letters with --offsets, --stage, --reason or --source-topic, or every letter with --all"))
			}
			if o.transactionalID == "" {
				o.transactionalID = cfg.Kafka.ClientID + "-dlq-redrive"
			}
			letters, err := readDLQ(cmd.Context(), cfg, *idle, o.chosen)
			if err != nil {
				return err
			}
			return redrive(cmd.Context(), cfg, letters, o, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.offsets, "offsets", "", "DLQ positions: partition:offset or partition:first-last, comma separated")
	fs.StringVar(&o.stage, "stage", "", "only letters of this stage (relay, room, mic, sink)")
	fs.StringVar(&o.reason, "reason", "", "only letters with this error_reason")
	fs.StringVar(&o.sourceTopic, "source-topic", "", "only letters refused from this topic")
	fs.BoolVar(&o.all, "all", false, "choose every letter (with no other selection)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "list what would be sent, send nothing")
	fs.BoolVar(&o.skipRefused, "skip-refused", false, "send the chosen letters that can be sent even when others cannot")
	fs.StringVar(&o.transactionalID, "transactional-id", "", "the producer's transactional id (default <kafka.client_id>-dlq-redrive)")
	return cmd
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
func (o redriveOpts) chosen(d dlqLetter) bool {
	l := d.Letter
	if (o.stage != "" && l.Stage != o.stage) || (o.reason != "" && l.Reason != o.reason) || (o.sourceTopic != "" && l.SourceTopic != o.sourceTopic) {
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

// redrive sends the chosen letters' records in one transaction.
func redrive(ctx context.Context, cfg *config.Config, letters []dlqLetter, o redriveOpts, w io.Writer) error {
	var recs []*kgo.Record
	var refused, repeats int
	// A repeat is one of the chosen letters, so choosing only the second
	// copy of a refused record still sends it.
	sent := map[envelope.Origin]bool{}
	for _, d := range letters {
		if !o.chosen(d) {
			continue
		}
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
		}
		if err != nil {
			refused++
			fmt.Fprintf(w, "refused %d:%d (%s %s): %v\n", d.Partition, d.Offset, d.Letter.Stage, d.Letter.Reason, err)
			continue
		}
		verb := "send"
		if o.dryRun {
			verb = "would send"
		}
		fmt.Fprintf(w, "%s %d:%d (%s %s) -> %s key %q event_id %s\n", verb, d.Partition, d.Offset, d.Letter.Stage, d.Letter.Reason,
			rec.Topic, rec.Key, envelope.Header(rec, envelope.HeaderEventID))
		recs = append(recs, rec)
	}
	if refused > 0 && !o.skipRefused {
		return fmt.Errorf("dlq redrive: %d chosen letters cannot be sent (listed above); nothing was sent (--skip-refused sends the other %d)", refused, len(recs))
	}
	if o.dryRun || len(recs) == 0 {
		fmt.Fprintf(w, "%d records would be sent (%d repeats skipped, %d refused); nothing sent\n", len(recs), repeats, refused)
		return nil
	}
	if err := produceInTransaction(ctx, cfg, o.transactionalID, recs); err != nil {
		return err
	}
	fmt.Fprintf(w, "sent %d records in one transaction (%d repeats skipped, %d refused)\n", len(recs), repeats, refused)
	return nil
}

// produceInTransaction produces recs in one transaction of transactionalID
// and commits it; on any error it aborts, so none is visible to
// read_committed consumers.
func produceInTransaction(ctx context.Context, cfg *config.Config, transactionalID string, recs []*kgo.Record) error {
	cl, err := cfg.Kafka.Cluster(nil, nil).NewClient("dlq-redrive", kgo.TransactionalID(transactionalID))
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
