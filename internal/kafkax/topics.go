package kafkax

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicMismatchError is an existing topic that does not match the design:
// fewer partitions than configured or than the topic it is co-partitioned
// with, not compacted (or compacted and deleting, where the design does not
// ask for it) where it must be, or compacted where it must not be.
// Existing topics are never altered: partition changes move keys and are an
// operator's decision.
type TopicMismatchError struct {
	Topic  string
	Reason string
}

func (e *TopicMismatchError) Error() string { return "topics: " + e.Topic + ": " + e.Reason }

// TopicSpec is one topic of the design and whether it is an internal,
// compacted state topic.
type TopicSpec struct {
	Key       string // its key under kafka.topics
	Name      string
	Compacted bool
	// Schema is the .proto file (its path under schemas/proto) of a
	// public topic's values: registered under <Name>-value and framed in
	// kafka.public_wire_format confluent. Empty: not public.
	Schema string
	// Configs are set when the topic is created, on top of
	// cleanup.policy=compact for a compacted one (a compacted topic with
	// a retention sets cleanup.policy=compact,delete and retention.ms).
	Configs map[string]string
	// CoPartitionedWith is the key of the topic whose partition p this
	// one's partition p mirrors (a changelog of its input's state): it
	// needs at least as many partitions. Empty: none.
	CoPartitionedWith string
}

// Public reports whether the topic is one of the public topics, the data
// team's contract.
func (s TopicSpec) Public() bool { return s.Schema != "" }

// TopicLayout is every topic roomflow needs and how to create a missing
// one.
type TopicLayout struct {
	Topics            []TopicSpec
	Partitions        int32
	ReplicationFactor int16 // -1: the broker's default
}

// TopicStatus is what EnsureTopics found or did for one topic.
type TopicStatus struct {
	Name       string
	Partitions int32
	Compacted  bool
	Created    bool
}

// EnsureTopics creates the missing topics of cfg.Topics with cfg.Partitions
// partitions (compacted for internal state topics) and checks existing ones.
// Every mismatch is returned as a *TopicMismatchError, joined; statuses are
// returned for every topic either way.
//
// Created topics are described from the create response.
func EnsureTopics(ctx context.Context, adm *kadm.Client, cfg TopicLayout) ([]TopicStatus, error) {
	// Fresh metadata, not the client's cache: a topic created a moment ago
	// (by us or another runner) must be seen as it is now.
	ctx = kadm.WithAuthorizedOps(ctx)
	specs := cfg.Topics
	existing, err := adm.ListTopics(ctx, topicNames(specs)...)
	if err != nil {
		return nil, fmt.Errorf("topics: list: %w", err)
	}
	var statuses []TopicStatus
	var errs []error
	var check []TopicSpec
	byKey := map[string]TopicSpec{}
	for _, s := range specs {
		byKey[s.Key] = s
	}
	for _, s := range specs {
		if d, ok := existing[s.Name]; ok && d.Err == nil {
			check = append(check, s)
			continue
		}
		var configs map[string]*string
		if s.Compacted {
			configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
		}
		for k, v := range s.Configs {
			if configs == nil {
				configs = map[string]*string{}
			}
			configs[k] = kadm.StringPtr(v)
		}
		// An input an operator has grown past kafka.partitions needs a
		// changelog of as many partitions.
		partitions := cfg.Partitions
		if d, ok := existing[byKey[s.CoPartitionedWith].Name]; s.CoPartitionedWith != "" && ok && d.Err == nil {
			partitions = max(partitions, int32(len(d.Partitions)))
		}
		resp, err := adm.CreateTopic(ctx, partitions, cfg.ReplicationFactor, configs, s.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists): // created concurrently by another runner
			check = append(check, s)
		case err != nil:
			return nil, fmt.Errorf("topics: create %s: %w", s.Name, err)
		default:
			n := resp.NumPartitions
			if n <= 0 { // brokers before 2.4 do not echo it
				n = partitions
			}
			statuses = append(statuses, TopicStatus{Name: s.Name, Partitions: n, Compacted: s.Compacted, Created: true})
		}
	}

	if len(check) > 0 {
		checkNames := topicNames(check)
		details, err := adm.ListTopics(ctx, checkNames...)
		if err != nil {
			return nil, fmt.Errorf("topics: list: %w", err)
		}
		rcs, err := adm.DescribeTopicConfigs(ctx, checkNames...)
		if err != nil {
			return nil, fmt.Errorf("topics: describe configs: %w", err)
		}
		policy := map[string]string{}
		for _, rc := range rcs {
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil {
					policy[rc.Name] = *c.Value
				}
			}
		}
		for _, s := range check {
			d := details[s.Name]
			pol := policy[s.Name]
			st := TopicStatus{Name: s.Name, Partitions: int32(len(d.Partitions)), Compacted: strings.Contains(pol, "compact")}
			statuses = append(statuses, st)
			if st.Partitions < cfg.Partitions {
				errs = append(errs, &TopicMismatchError{Topic: s.Name,
					Reason: fmt.Sprintf("has %d partitions, kafka.partitions is %d", st.Partitions, cfg.Partitions)})
			}
			switch {
			case s.Compacted && !st.Compacted:
				errs = append(errs, &TopicMismatchError{Topic: s.Name, Reason: "must have cleanup.policy=compact"})
			case s.Compacted && strings.Contains(pol, "delete") && !strings.Contains(s.Configs["cleanup.policy"], "delete"):
				// delete drops a key's last record after retention.ms: lost
				// state or totals, unless the design asks for it.
				errs = append(errs, &TopicMismatchError{Topic: s.Name, Reason: "must have cleanup.policy=compact, not " + pol})
			case !s.Compacted && st.Compacted:
				// Compaction keeps a key's last record only: the older
				// events of a room or user a lagging reader still needs.
				errs = append(errs, &TopicMismatchError{Topic: s.Name, Reason: "must have cleanup.policy=delete, not " + pol})
			}
		}
	}
	errs = append(errs, coPartitioned(specs, byKey, statuses)...)
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Name < statuses[j].Name })
	return statuses, errors.Join(errs...)
}

// coPartitioned reports the topics of specs with fewer partitions in
// statuses than the topic they are co-partitioned with.
func coPartitioned(specs []TopicSpec, byKey map[string]TopicSpec, statuses []TopicStatus) []error {
	parts := map[string]int32{}
	for _, st := range statuses {
		parts[st.Name] = st.Partitions
	}
	var errs []error
	for _, s := range specs {
		if s.CoPartitionedWith == "" {
			continue
		}
		in := byKey[s.CoPartitionedWith].Name
		n, okS := parts[s.Name]
		m, okIn := parts[in]
		if okS && okIn && n < m {
			errs = append(errs, &TopicMismatchError{Topic: s.Name,
				Reason: fmt.Sprintf("has %d partitions, fewer than the %d of %s it is co-partitioned with", n, m, in)})
		}
	}
	return errs
}

// topicNames are the names of specs, in their order.
func topicNames(specs []TopicSpec) []string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return names
}
