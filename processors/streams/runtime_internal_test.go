package streams

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Changelog records go to the partition the runtime set (co-partitioned
// with the input); every other keyed record is hashed like the Java client,
// whatever partition it names.
func TestPartitionerKeepsChangelogPartition(t *testing.T) {
	p := partitioner{changelog: "cl", def: kgo.StickyKeyPartitioner(nil)}
	murmur2 := kgo.StickyKeyPartitioner(nil).ForTopic("out")
	for _, key := range []string{"a", "room-17", "user-4242", "seen:a"} {
		rec := &kgo.Record{Topic: "cl", Partition: 5, Key: []byte(key)}
		if got := p.ForTopic("cl").Partition(rec, 8); got != 5 {
			t.Errorf("changelog record %q to partition %d, want the task's 5", key, got)
		}
		rec = &kgo.Record{Topic: "out", Partition: 5, Key: []byte(key)}
		if got, want := p.ForTopic("out").Partition(rec, 8), murmur2.Partition(rec, 8); got != want {
			t.Errorf("output record %q to partition %d, want %d (murmur2 of its key)", key, got, want)
		}
	}
}

// A partition assigned and revoked in one batch of group events is not
// restored: removeAll drops exactly the revoked ones.
func TestRemoveAllDropsRevoked(t *testing.T) {
	got := removeAll([]int32{0, 1, 2, 3}, []int32{3, 1})
	if !slices.Equal(got, []int32{0, 2}) {
		t.Fatalf("removeAll([0 1 2 3], [3 1]) = %v, want [0 2]", got)
	}
}
