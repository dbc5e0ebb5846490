package main

import (
	"math"
	"slices"
)

// dist summarises durations, in microseconds.
type dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_us"`
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P99  float64 `json:"p99_us"`
	Max  float64 `json:"max_us"`
}

func summarize(ns []int64) dist {
	if len(ns) == 0 {
		return dist{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		i = max(0, min(i, len(s)-1))
		return float64(s[i]) / 1e3
	}
	return dist{
		N:    len(s),
		Mean: sum / float64(len(s)) / 1e3,
		P50:  q(0.50),
		P90:  q(0.90),
		P99:  q(0.99),
		Max:  float64(s[len(s)-1]) / 1e3,
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}

// pairedRatios divides a by b round by round (rounds both measured), rounded as the
// totals' ratios are.
func pairedRatios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, round(a[i]/b[i], 3))
		}
	}
	return out
}
