package kafkax

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TopicRetention reads how long the brokers may keep each of topics'
// records: retention.ms plus segment.ms (Kafka deletes whole segments, once
// a segment's newest record is past retention.ms, so a record can outlive
// retention.ms by a segment's span). The values are the topic's own or the
// broker defaults the brokers report. A topic kept forever
// (retention.ms=-1) is returned as a negative duration.
func TopicRetention(ctx context.Context, adm *kadm.Client, topics ...string) (map[string]time.Duration, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("read the retention.ms of %v: %w", topics, err)
	}
	out := map[string]time.Duration{}
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("read the retention.ms of %s: %w", rc.Name, rc.Err)
		}
		ms := map[string]int64{}
		for _, c := range rc.Configs {
			if (c.Key != "retention.ms" && c.Key != "segment.ms") || c.Value == nil {
				continue
			}
			v, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %q is not a number", rc.Name, c.Key, *c.Value)
			}
			ms[c.Key] = v
		}
		switch r, ok := ms["retention.ms"]; {
		case !ok:
		case r < 0:
			out[rc.Name] = -1
		default:
			out[rc.Name] = time.Duration(r+max(0, ms["segment.ms"])) * time.Millisecond
		}
	}
	return out, nil
}
