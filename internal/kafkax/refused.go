package kafkax

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// GroupRefusedError is a consumer group member the broker refuses for
// good (GroupRefused): no retry changes the answer, so a component ends
// its Run with it (the process exits 1 naming the group and the error)
// instead of staying up, ready, with no partitions.
type GroupRefusedError struct {
	Group string
	// Topic is the input topic the broker refuses the member, "" when it
	// refuses the group itself.
	Topic string
	Err   error // the broker's error (a *kerr.Error)
}

func (e *GroupRefusedError) Error() string {
	if e.Topic != "" {
		return fmt.Sprintf("the broker refuses consumer group %s the topic %s: %v", e.Group, e.Topic, e.Err)
	}
	return fmt.Sprintf("the broker refuses consumer group %s: %v", e.Group, e.Err)
}

func (e *GroupRefusedError) Unwrap() error { return e.Err }

// GroupRefused reports whether err, from a consumer group member's poll,
// answers the member's settings or rights rather than the moment: a
// session timeout outside group.min/max.session.timeout.ms, no ACL on the
// group or on an input topic, an invalid group id, a static member id
// another process uses. franz-go retries these
// for ever, as it does the errors of the moment (a coordinator moving or
// loading, a rebalance), which stay retried.
//
// TOPIC_AUTHORIZATION_FAILED counts: brokers answer it for a topic the
// principal may not describe or read whether the topic exists or not, so
// it is an ACL, like the group's. FENCED_INSTANCE_ID counts: another live
// process joined with the same static member id, and kgo's rejoins are
// fenced again for as long as both run. UNKNOWN_TOPIC_OR_PARTITION does
// not: an
// input not created yet is waited for (franz-go retries it without
// surfacing it, and no component requires its topics at start), so a
// component may start before `roomflow topics`.
func GroupRefused(err error) bool {
	return errors.Is(err, kerr.InvalidSessionTimeout) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.InvalidGroupID) || errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.FencedInstanceID)
}

// RefusedGroup returns a *GroupRefusedError for the first error of fs that
// GroupRefused counts, nil when there is none. fs is a poll of group's
// member.
func RefusedGroup(group string, fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		if !GroupRefused(fe.Err) {
			continue
		}
		// The broker's own error, without franz-go's wrapping (a group
		// error comes as "unable to join group session: ...").
		var ke *kerr.Error
		err := fe.Err
		if errors.As(err, &ke) {
			err = ke
		}
		ge := &GroupRefusedError{Group: group, Err: err}
		if errors.Is(err, kerr.TopicAuthorizationFailed) {
			ge.Topic = fe.Topic
		}
		return ge
	}
	return nil
}
