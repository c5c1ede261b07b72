// Package cfgerr is the one way a roomflow component reports an invalid
// configuration value: a *FieldError naming the key of the value.
//
// The dialect: every component (relay, processor runtime, sinks, IM
// publisher) owns a Config struct of its settings and dependencies. Its
// Validate returns the problems joined, each a *FieldError keyed by the
// component's own field name in snake case ("batch_size"), never by where
// the value came from. cmd/roomflow's wiring maps the application config
// onto each component's Config and re-keys the errors with Under, so an
// operator reads the dotted key of the YAML file ("relay.batch_size: must
// be > 0"). A component never imports the application config.
package cfgerr

import (
	"errors"
	"fmt"
	"time"
)

// FieldError is an invalid configuration value. Key names it: a field of
// the component that validated it, or after Under the application's dotted
// key. Msg never holds a secret value.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string { return "config: " + e.Key + ": " + e.Msg }

// Checks collects field errors while a Validate walks its fields; the zero
// value is ready to use.
type Checks struct{ errs []error }

// Bad records that key is invalid for the reason format (fmt.Sprintf).
func (c *Checks) Bad(key, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// Positive requires v > 0.
func (c *Checks) Positive(key string, v int) {
	if v <= 0 {
		c.Bad(key, "must be > 0 (got %d)", v)
	}
}

// PositiveDuration requires d > 0.
func (c *Checks) PositiveDuration(key string, d time.Duration) {
	if d <= 0 {
		c.Bad(key, "must be a positive duration (got %s)", d)
	}
}

// Set requires a non-empty string.
func (c *Checks) Set(key, v string) {
	if v == "" {
		c.Bad(key, "must be set")
	}
}

// Add records err as it is (a nested component's Validate, already keyed).
func (c *Checks) Add(err error) {
	if err != nil {
		c.errs = append(c.errs, err)
	}
}

// Err returns every recorded problem joined, or nil.
func (c *Checks) Err() error { return errors.Join(c.errs...) }

// Under re-keys every FieldError in err (a single one or an errors.Join
// tree) for the application config: a key listed in keys becomes its
// value, any other becomes prefix + "." + key. Other errors are kept as
// they are. It is what cmd/roomflow's wiring calls on a component's
// Validate result.
func Under(prefix string, keys map[string]string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, Under(prefix, keys, e))
		}
		return errors.Join(out...)
	}
	if !errors.As(err, &fe) {
		return err
	}
	key, ok := keys[fe.Key]
	if !ok {
		key = prefix + "." + fe.Key
	}
	return &FieldError{Key: key, Msg: fe.Msg}
}

// TopicName returns why name is not a valid Kafka topic name, or nil.
func TopicName(name string) error {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return fmt.Errorf("invalid topic name %q", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("invalid topic name %q: only [a-zA-Z0-9._-]", name)
		}
	}
	return nil
}

// Topic requires a valid Kafka topic name (see TopicName).
func (c *Checks) Topic(key, name string) {
	if err := TopicName(name); err != nil {
		c.Bad(key, "%v", err)
	}
}

// Keys lists the key of every FieldError in err (a single one or an
// errors.Join tree), in order; tests and tools check which keys a
// Validate named with it.
func Keys(err error) []string {
	if err == nil {
		return nil
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var keys []string
		for _, e := range joined.Unwrap() {
			keys = append(keys, Keys(e)...)
		}
		return keys
	}
	if fe, ok := err.(*FieldError); ok {
		return []string{fe.Key}
	}
	if inner := errors.Unwrap(err); inner != nil {
		return Keys(inner) // a wrapper (fmt.Errorf %w, *UsageError) of a tree
	}
	return nil
}

// Default sets *field to def when it holds its type's zero value: a
// component's setDefaults is one line per field.
func Default[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// UsageError is a mistake in how roomflow was invoked or configured: an
// unknown command or flag, a wrong argument, a config file that cannot be
// read or decoded. The process cannot start as asked; cmd/roomflow exits
// with status 2 for it (and for any *FieldError), 1 for runtime failures.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the mistake.
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err as a *UsageError; nil stays nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// IsUsage reports whether err, or any error it wraps (errors.Join trees
// included), is a *UsageError or a *FieldError: a usage or configuration
// mistake rather than a runtime failure.
func IsUsage(err error) bool {
	var ue *UsageError
	var fe *FieldError
	return errors.As(err, &ue) || errors.As(err, &fe)
}
