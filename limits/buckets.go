package limits

import "math"

// refill is the bucket's level at now, from level at at.
func refill(level float64, at, now, limit int64) float64 {
	if now > at {
		level += float64(now-at) * float64(limit) / minuteMicros
	}
	return math.Min(level, float64(limit))
}

// waitFor is how long until the bucket holds take, in µs; -1 when it never can.
func waitFor(level float64, take, limit int64) int64 {
	if take > limit {
		return -1
	}
	return int64(math.Ceil((float64(take)-level)*minuteMicros/float64(limit) - ceilSlack))
}

// fullIn is how long until the bucket is whole again, in µs.
func fullIn(level float64, limit int64) int64 {
	return max(int64(math.Ceil((float64(limit)-level)*minuteMicros/float64(limit)-ceilSlack)), 0)
}
