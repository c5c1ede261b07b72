package kafkax_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hyapp/roomflow/internal/config"
	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestEnsureTopicsCreatesThenChecks(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics(), testenv.Partitions(4))
	adm := k.Admin(t)
	app := config.Default()
	app.Kafka = k.Config
	st, err := kafkax.EnsureTopics(ctx(t), adm, app.TopicLayout())
	if err != nil {
		t.Fatal(err)
	}
	// The daily totals topic is created compact,delete with the window of
	// mic.day_totals_retention; the relay offsets topic compacted with
	// small segments, so a new leader's read from its start stays short.
	rcs, err := adm.DescribeTopicConfigs(ctx(t), k.Config.Topics.MicDailyTotals, k.Config.Topics.RelayOffsets)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]string{}
	for _, rc := range rcs {
		got[rc.Name] = map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				got[rc.Name][c.Key] = *c.Value
			}
		}
	}
	if g := got[k.Config.Topics.MicDailyTotals]; g["cleanup.policy"] != "compact,delete" || g["retention.ms"] != "259200000" {
		t.Errorf("daily totals topic: cleanup.policy %q retention.ms %q", g["cleanup.policy"], g["retention.ms"])
	}
	if g := got[k.Config.Topics.RelayOffsets]; g["cleanup.policy"] != "compact" || g["segment.bytes"] != "16777216" || g["segment.ms"] != "3600000" {
		t.Errorf("relay offsets topic: cleanup.policy %q segment.bytes %q segment.ms %q", g["cleanup.policy"], g["segment.bytes"], g["segment.ms"])
	}
	specs := k.Config.Topics.List()
	if len(st) != len(specs) {
		t.Fatalf("got %d statuses, want %d", len(st), len(specs))
	}
	byName := map[string]kafkax.TopicStatus{}
	for _, s := range st {
		byName[s.Name] = s
	}
	for _, spec := range specs {
		s, ok := byName[spec.Name]
		if !ok || !s.Created || s.Partitions != 4 || s.Compacted != spec.Compacted {
			t.Errorf("%s: %+v (want created, 4 partitions, compacted=%v)", spec.Name, s, spec.Compacted)
		}
	}
	// Second run: nothing created, nothing wrong.
	st, err = kafkax.EnsureTopics(ctx(t), adm, k.Config.Layout())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Created {
			t.Errorf("%s created twice", s.Name)
		}
	}
}

func TestEnsureTopicsReportsMismatch(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics(), testenv.Partitions(4))
	adm := k.Admin(t)
	// An existing topic with too few partitions, and an internal topic
	// created without compaction.
	if _, err := adm.CreateTopic(ctx(t), 2, -1, nil, k.Config.Topics.RoomEvents); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx(t), 4, -1, nil, k.Config.Topics.MicStateChangelog); err != nil {
		t.Fatal(err)
	}
	_, err := kafkax.EnsureTopics(ctx(t), adm, k.Config.Layout())
	if err == nil {
		t.Fatal("mismatch not reported")
	}
	found := map[string]bool{}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var me *kafkax.TopicMismatchError
		if errors.As(e, &me) {
			found[me.Topic] = true
		}
	}
	if !found[k.Config.Topics.RoomEvents] || !found[k.Config.Topics.MicStateChangelog] || len(found) != 2 {
		t.Fatalf("want mismatches for room events and mic changelog only, got %v (%v)", found, err)
	}
	// The other topics were still created.
	d, lerr := adm.ListTopics(kadm.WithAuthorizedOps(ctx(t)), k.Config.Topics.MicLedger)
	if lerr != nil || !d.Has(k.Config.Topics.MicLedger) {
		t.Fatalf("missing topics must still be created: %v", lerr)
	}
}

// A state or totals topic that also deletes (compact,delete: the broker
// drops a key's last record after retention.ms) loses state and totals:
// a mismatch, except where the design asks for it (the daily totals).
func TestEnsureTopicsRefusesDeletingCompactedTopics(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics(), testenv.Partitions(2))
	adm := k.Admin(t)
	both := map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")}
	tp := k.Config.Topics
	for _, name := range []string{tp.MicStateChangelog, tp.MicLifetimeTotals, tp.MicDailyTotals} {
		if _, err := adm.CreateTopic(ctx(t), 2, -1, both, name); err != nil {
			t.Fatal(err)
		}
	}
	_, err := kafkax.EnsureTopics(ctx(t), adm, k.Config.Layout())
	found := map[string]bool{}
	if err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var me *kafkax.TopicMismatchError
			if errors.As(e, &me) {
				found[me.Topic] = true
			}
		}
	}
	if !found[tp.MicStateChangelog] || !found[tp.MicLifetimeTotals] || len(found) != 2 {
		t.Fatalf("want mismatches for the changelog and the lifetime totals only, got %v (%v)", found, err)
	}
}

// mismatches is the topics err reports a *TopicMismatchError for.
func mismatches(t *testing.T, err error) map[string]string {
	t.Helper()
	found := map[string]string{}
	if err == nil {
		return found
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var me *kafkax.TopicMismatchError
		if errors.As(e, &me) {
			found[me.Topic] = me.Reason
		}
	}
	return found
}

// A data topic created compacted (a hand-made or operator-made topic) keeps
// only a key's last record once a segment rolls: the room events of a room
// or the ledger entries of a user a lagging reader has not read yet are
// gone. roomflow topics must refuse it as it refuses an uncompacted state
// topic.
func TestEnsureTopicsRefusesCompactedDataTopics(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics(), testenv.Partitions(2))
	adm := k.Admin(t)
	compact := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	tp := k.Config.Topics
	for _, name := range []string{tp.RoomEvents, tp.MicLedger} {
		if _, err := adm.CreateTopic(ctx(t), 2, -1, compact, name); err != nil {
			t.Fatal(err)
		}
	}
	_, err := kafkax.EnsureTopics(ctx(t), adm, k.Config.Layout())
	found := mismatches(t, err)
	if found[tp.RoomEvents] == "" || found[tp.MicLedger] == "" || len(found) != 2 {
		t.Fatalf("want mismatches for the room events and the mic ledger only, got %v (%v)", found, err)
	}
}

// The mic state changelog is co-partitioned with the mic events (partition
// p of the changelog holds the state of input partition p; the processor
// refuses to start on a changelog with fewer partitions). An input that
// already has more partitions than kafka.partitions (raised by an
// operator) must get a changelog created with as many, and an existing
// changelog with fewer must be reported, not passed.
func TestEnsureTopicsCoPartitionsTheChangelog(t *testing.T) {
	k := testenv.NewKafka(t, testenv.NoTopics(), testenv.Partitions(2))
	adm := k.Admin(t)
	tp := k.Config.Topics
	if _, err := adm.CreateTopic(ctx(t), 4, -1, nil, tp.UserMicEvents); err != nil {
		t.Fatal(err)
	}
	st, err := kafkax.EnsureTopics(ctx(t), adm, k.Config.Layout())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Name == tp.MicStateChangelog && s.Partitions != 4 {
			t.Errorf("changelog created with %d partitions, want the input's 4", s.Partitions)
		}
	}

	k2 := testenv.NewKafka(t, testenv.NoTopics(), testenv.Partitions(2))
	adm2 := k2.Admin(t)
	tp2 := k2.Config.Topics
	if _, err := adm2.CreateTopic(ctx(t), 4, -1, nil, tp2.UserMicEvents); err != nil {
		t.Fatal(err)
	}
	compact := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	if _, err := adm2.CreateTopic(ctx(t), 2, -1, compact, tp2.MicStateChangelog); err != nil {
		t.Fatal(err)
	}
	_, err = kafkax.EnsureTopics(ctx(t), adm2, k2.Config.Layout())
	if found := mismatches(t, err); found[tp2.MicStateChangelog] == "" || len(found) != 1 {
		t.Fatalf("want a mismatch for the changelog only, got %v (%v)", found, err)
	}
}
