// Package percentile holds the one percentile rule the run breakdowns and
// the cost predictions share, so a p90 reads the same everywhere it is shown.
package percentile

import "slices"

// NearestRank is the p-th percentile of values by the nearest-rank rule
// (the smallest value with at least p% of values at or below it); 0 for no
// values. values is sorted in place.
func NearestRank(values []int64, p int) int64 {
	if len(values) == 0 {
		return 0
	}
	slices.Sort(values)
	rank := (p*len(values) + 99) / 100
	return values[max(rank, 1)-1]
}
