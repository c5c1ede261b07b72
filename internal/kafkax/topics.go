package kafkax

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/hyapp/roomflow/internal/config"
)

// TopicMismatchError is an existing topic that does not match the design:
// fewer partitions than configured, or not compacted where it must be.
// Existing topics are never altered: partition changes move keys and are an
// operator's decision.
type TopicMismatchError struct {
	Topic  string
	Reason string
}

func (e *TopicMismatchError) Error() string { return "topics: " + e.Topic + ": " + e.Reason }

// TopicStatus is what EnsureTopics found or did for one topic.
type TopicStatus struct {
	Name       string
	Partitions int32
	Compacted  bool
	Created    bool
}

// EnsureTopics creates missing topics of cfg.Topics with cfg.Partitions
// partitions (compacted for internal state topics) and checks existing ones.
// Every mismatch is returned as a *TopicMismatchError, joined; statuses are
// returned for every topic either way.
func EnsureTopics(ctx context.Context, adm *kadm.Client, cfg config.KafkaConfig) ([]TopicStatus, error) {
	specs := cfg.Topics.List()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	existing, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("topics: list: %w", err)
	}
	var created []string
	for _, s := range specs {
		if existing.Has(s.Name) && existing[s.Name].Err == nil {
			continue
		}
		var configs map[string]*string
		if s.Compacted {
			configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
		}
		resp, err := adm.CreateTopic(ctx, cfg.Partitions, cfg.ReplicationFactor, configs, s.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("topics: create %s: %w", s.Name, err)
		}
		created = append(created, s.Name)
	}

	// Metadata of a new topic reaches every broker a moment after creation.
	var details kadm.TopicDetails
	for {
		if details, err = adm.ListTopics(ctx, names...); err != nil {
			return nil, fmt.Errorf("topics: list: %w", err)
		}
		if len(created) == 0 || allPresent(details, created) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topics: waiting for created topics: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("topics: describe configs: %w", err)
	}
	compacted := map[string]bool{}
	for _, rc := range rcs {
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				compacted[rc.Name] = strings.Contains(*c.Value, "compact")
			}
		}
	}
	var statuses []TopicStatus
	var errs []error
	for _, s := range specs {
		d, ok := details[s.Name]
		if !ok || d.Err != nil {
			errs = append(errs, &TopicMismatchError{Topic: s.Name, Reason: "missing after create"})
			continue
		}
		st := TopicStatus{Name: s.Name, Partitions: int32(len(d.Partitions)), Compacted: compacted[s.Name]}
		for _, c := range created {
			st.Created = st.Created || c == s.Name
		}
		statuses = append(statuses, st)
		if st.Partitions < cfg.Partitions {
			errs = append(errs, &TopicMismatchError{Topic: s.Name,
				Reason: fmt.Sprintf("has %d partitions, kafka.partitions is %d", st.Partitions, cfg.Partitions)})
		}
		if s.Compacted && !st.Compacted {
			errs = append(errs, &TopicMismatchError{Topic: s.Name, Reason: "must have cleanup.policy=compact"})
		}
	}
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Name < statuses[j].Name })
	return statuses, errors.Join(errs...)
}


func allPresent(d kadm.TopicDetails, names []string) bool {
	for _, n := range names {
		if t, ok := d[n]; !ok || t.Err != nil || len(t.Partitions) == 0 {
			return false
		}
	}
	return true
}
