package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Traffic is who sends which lucky gifts when: Rooms rooms and Users
// users, each picked by popularity (Zipf with exponent RoomSkew, UserSkew:
// rank k+1 weighs (k+1)^-s; 0 is uniform), the gift and gift_count of each
// draw from GiftMix, and Draws draws spread evenly over Hours (or Rate a
// second for Hours).
type Traffic struct {
	Rooms, Users       int
	RoomSkew, UserSkew float64
	GiftMix            []GiftShare
	Draws              int64
	Rate               float64
	Hours              float64
}

// GiftShare is one entry of the gift mix: Weight (relative) of the draws
// send GiftCount of GiftID.
type GiftShare struct {
	GiftID    string
	GiftCount int32
	Weight    float64
}

// ParseGiftMix reads --gift-mix: comma-separated GIFT_ID:COUNT=WEIGHT
// entries ("lucky-rose:1=70,lucky-rose:10=30"); COUNT and =WEIGHT may be
// left out (1 and 1).
func ParseGiftMix(s string) ([]GiftShare, error) {
	var out []GiftShare
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		g := GiftShare{GiftCount: 1, Weight: 1}
		if i := strings.LastIndexByte(e, '='); i >= 0 {
			w, err := strconv.ParseFloat(e[i+1:], 64)
			if err != nil || !(w > 0) || math.IsInf(w, 0) {
				return nil, fmt.Errorf("%q: the weight must be a positive number", e)
			}
			g.Weight, e = w, e[:i]
		}
		if i := strings.LastIndexByte(e, ':'); i >= 0 {
			n, err := strconv.ParseInt(e[i+1:], 10, 32)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("%q: the gift count must be a positive integer", e)
			}
			g.GiftCount, e = int32(n), e[:i]
		}
		if e == "" {
			return nil, errors.New("an entry has no gift id")
		}
		g.GiftID = e
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil, errors.New("no entries")
	}
	return out, nil
}

// alias samples an index with fixed weights in O(1) (Vose's alias
// method): a Zipf pick costs one random number and integer arithmetic,
// not rand.Zipf's logarithms, which keeps a simulated draw near the cost
// of the draw itself.
type alias struct {
	keep  []uint32 // column i keeps i when the low 32 bits fall below it
	alias []int32
}

func newAlias(w []float64) alias {
	n := len(w)
	a := alias{keep: make([]uint32, n), alias: make([]int32, n)}
	var sum float64
	for _, v := range w {
		sum += v
	}
	var small, large []int32
	scaled := make([]float64, n)
	for i, v := range w {
		scaled[i] = v * float64(n) / sum
		if scaled[i] < 1 {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		a.keep[s], a.alias[s] = uint32(scaled[s]*(1<<32)), l
		scaled[l] -= 1 - scaled[s]
		if scaled[l] < 1 {
			large, small = large[:len(large)-1], append(small, l)
		}
	}
	for _, i := range append(small, large...) {
		a.keep[i], a.alias[i] = math.MaxUint32, i
	}
	return a
}

// pick takes the column from the high 32 bits of one random number and
// decides between it and its alias with the low 32.
func (a alias) pick(r *rand.Rand) int {
	u := r.Uint64()
	i := int((u >> 32) * uint64(len(a.keep)) >> 32)
	if uint32(u) < a.keep[i] {
		return i
	}
	return int(a.alias[i])
}

// zipfWeights are the weights of n ranks under exponent s.
func zipfWeights(n int, s float64) []float64 {
	w := make([]float64, n)
	for k := range w {
		w[k] = math.Pow(float64(k+1), -s)
	}
	return w
}
