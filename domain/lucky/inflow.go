// Package lucky is the lucky-gift domain (docs/requirements.md LUCKY-*): rule versions and their
// reward tiers, their validation, and the integer ppm arithmetic that
// splits a lucky gift's heat into the platform, room and gift pool layers.
// The room processor and the draw service both take them from here.
//
// It is pure and deterministic: no I/O, no clock. Rule versions are read
// from MySQL by its sub-package rulestore.
package lucky

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// PPM is one whole in parts per million.
const PPM = 1_000_000

// Inflow is what one lucky gift adds to the pools, in integer coins.
// PlatformIn + RoomIn + GiftIn == PoolIn, none negative.
type Inflow struct {
	PoolIn     int64
	PlatformIn int64
	RoomIn     int64
	GiftIn     int64
}

var (
	// ErrNegativeHeat is a gift with a negative heat_value.
	ErrNegativeHeat = errors.New("lucky: negative heat_value")
	// ErrOverflow is a result that does not fit in int64. With a
	// validated rule (every ppm <= 1,000,000) it cannot happen: the
	// products are computed in 128 bits and each floor(x*ppm/1e6) <= x.
	ErrOverflow = errors.New("lucky: inflow overflows int64")
)

// ComputeInflow applies LUCKY-4's formula with exact integer arithmetic:
//
//	pool_in     = floor(heat * pool_rate_ppm / 1e6)
//	platform_in = floor(pool_in * platform_weight_ppm / 1e6)
//	room_in     = floor(pool_in * room_weight_ppm / 1e6)
//	gift_in     = pool_in - platform_in - room_in
//
// Products use 128-bit intermediates, so any heat up to math.MaxInt64 is
// exact. It fails with ErrNegativeHeat, with ErrOverflow when a result does
// not fit in int64 (only with ppm values above 1e6, i.e. an unvalidated
// rule), and with an error for negative ppm values.
func ComputeInflow(heat int64, r *Rule) (Inflow, error) {
	if heat < 0 {
		return Inflow{}, ErrNegativeHeat
	}
	if r.PoolRatePPM < 0 || r.PlatformWeightPPM < 0 || r.RoomWeightPPM < 0 {
		return Inflow{}, fmt.Errorf("lucky: negative ppm in rule %s/%s", r.GiftID, r.RuleVersion)
	}
	pool, err := mulPPM(heat, r.PoolRatePPM)
	if err != nil {
		return Inflow{}, err
	}
	platform, err := mulPPM(pool, r.PlatformWeightPPM)
	if err != nil {
		return Inflow{}, err
	}
	room, err := mulPPM(pool, r.RoomWeightPPM)
	if err != nil {
		return Inflow{}, err
	}
	gift := pool - platform - room
	if gift < 0 {
		// platform + room weights above 1e6: an unvalidated rule.
		return Inflow{}, fmt.Errorf("%w: platform and room weights exceed the pool in rule %s/%s", ErrOverflow, r.GiftID, r.RuleVersion)
	}
	return Inflow{PoolIn: pool, PlatformIn: platform, RoomIn: room, GiftIn: gift}, nil
}

// mulPPM is floor(x * ppm / 1e6) for x, ppm >= 0, exact in 128 bits.
func mulPPM(x, ppm int64) (int64, error) {
	hi, lo := bits.Mul64(uint64(x), uint64(ppm))
	if hi >= PPM {
		return 0, ErrOverflow // quotient needs more than 64 bits
	}
	q, _ := bits.Div64(hi, lo, PPM)
	if q > math.MaxInt64 {
		return 0, ErrOverflow
	}
	return int64(q), nil
}
