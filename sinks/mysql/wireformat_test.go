package mysqlsink_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hyapp/roomflow/schemas/activityv1"
	"github.com/hyapp/roomflow/schemas/envelope"
	"github.com/hyapp/roomflow/sinks/mysql/sinktest"
)

// A wire format switch as the sink sees it: one inflow topic holds plain
// records, Confluent-framed ones with the confluent content-type, and
// framed ones without it, interleaved; every one is applied once and the
// pools equal what the inflows say.
func TestMixedWireFormatsApplied(t *testing.T) {
	e := newEnv(t, 2)
	inflows := sinktest.NewInflowGen(35, "hyapp", 6, 3).Next(900)
	o := sinktest.NewOracle()
	o.AddInflows(inflows...)
	f := envelope.Confluent(17, (&activityv1.LuckyPoolInflow{}).ProtoReflect().Descriptor())
	recs := sinktest.InflowRecords(e.inflowTopic(), inflows)
	for i, r := range recs {
		switch i % 3 {
		case 1: // framed, said so
			r.Value = append(append([]byte(nil), f.Prefix...), r.Value...)
			for j := range r.Headers {
				if r.Headers[j].Key == envelope.HeaderContentType {
					r.Headers[j].Value = f.Header()
				}
			}
		case 2: // framed, no content-type: detected by the leading 0
			r.Value = append(append([]byte(nil), f.Prefix...), r.Value...)
			r.Headers = withoutHeader(r.Headers, envelope.HeaderContentType)
		}
	}
	if err := sinktest.Produce(context.Background(), e.k.Client(t, kgo.ProducerLinger(0)), recs); err != nil {
		t.Fatal(err)
	}
	e.applyAll(t, o)
}

func withoutHeader(h []kgo.RecordHeader, key string) []kgo.RecordHeader {
	out := h[:0]
	for _, x := range h {
		if x.Key != key {
			out = append(out, x)
		}
	}
	return out
}
