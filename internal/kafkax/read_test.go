package kafkax_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/internal/kafkax"
	"github.com/hyapp/roomflow/internal/testenv"
)

// produceTxn writes values to topic in one transaction, committed or
// aborted.
func produceTxn(t *testing.T, k *testenv.Kafka, topic string, commit bool, values ...string) {
	t.Helper()
	cl := k.Client(t, kgo.TransactionalID("read-test-"+strconv.FormatBool(commit)), kgo.DefaultProduceTopic(topic))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx(t), &kgo.Record{Value: []byte(v), Partition: 0}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx(t), kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
	cl.Close()
}

// TestReadCommittedStopsAtTheCommittedEnd reads committed records only,
// in order, and returns once the committed end of the call is reached,
// though the last offset is an abort marker; a second read from where the
// first ended sees only what came after.
func TestReadCommittedStopsAtTheCommittedEnd(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	topic := k.Config.Topics.DLQ
	produceTxn(t, k, topic, true, "a", "b")
	produceTxn(t, k, topic, false, "aborted")
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return k.Cluster().NewClient("read-test", opts...) }
	read := func(from kafkax.Offsets) (got []string, next kafkax.Offsets) {
		next = kafkax.Offsets{}
		err := kafkax.ReadCommitted(ctx(t), newClient, from, 0, func(r *kgo.Record) (bool, error) {
			next[r.Topic] = map[int32]int64{r.Partition: r.Offset + 1}
			if !r.Attrs.IsControl() {
				got = append(got, string(r.Value))
			}
			return false, nil
		}, topic)
		if err != nil {
			t.Fatal(err)
		}
		return got, next
	}
	got, next := read(nil)
	if want := "[a b]"; fmt.Sprint(got) != want {
		t.Fatalf("read %v, want %s", got, want)
	}
	produceTxn(t, k, topic, true, "c")
	if got, _ := read(next); fmt.Sprint(got) != "[c]" {
		t.Fatalf("second read %v, want [c]", got)
	}
}

// TestReadCommittedStopsWhenAsked ends at the first record fn stops at,
// and fails for a topic that does not exist.
func TestReadCommittedStopsWhenAsked(t *testing.T) {
	k := testenv.NewKafka(t, testenv.Partitions(1))
	topic := k.Config.Topics.DLQ
	produceTxn(t, k, topic, true, "a", "b", "c")
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return k.Cluster().NewClient("read-test", opts...) }
	var got []string
	err := kafkax.ReadCommitted(ctx(t), newClient, nil, 0, kafkax.DataRecords(func(r *kgo.Record) (bool, error) {
		got = append(got, string(r.Value))
		return string(r.Value) == "b", nil
	}), topic)
	if err != nil || fmt.Sprint(got) != "[a b]" {
		t.Fatalf("read %v, %v; want [a b]", got, err)
	}
	if err := kafkax.ReadCommitted(ctx(t), newClient, nil, 0, kafkax.DataRecords(func(*kgo.Record) (bool, error) { return false, nil }), "no-such-topic"); err == nil {
		t.Fatal("a topic that does not exist read without error")
	}
}
