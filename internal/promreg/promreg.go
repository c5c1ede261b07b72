// Package promreg registers Prometheus collectors the one way every roomflow
// component does. It depends on nothing of roomflow, so domain packages use
// it without pulling in the process frame.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns the collector to use: c, or the
// identical collector already registered there, so two instances of a
// component on one registry (two runtimes, two IM clients, two relays in a
// test) share their series instead of failing. A nil reg leaves c
// unregistered. It panics, like MustRegister, when reg holds a different
// collector under c's name or c is invalid: a programming error.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ex, ok := are.ExistingCollector.(C); ok {
				return ex
			}
		}
		panic(err)
	}
	return c
}
