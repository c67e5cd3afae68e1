package percentile

import "testing"

func TestNearestRank(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		p    int
		want int64
	}{{nil, 90, 0}, {[]int64{5}, 50, 5}, {[]int64{4, 1, 3, 2}, 50, 2}, {[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9}, {[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 90, 10}, {[]int64{3, 1, 2}, 1, 1}} {
		if got := NearestRank(c.in, c.p); got != c.want {
			t.Errorf("p%d of %v = %d, want %d", c.p, c.in, got, c.want)
		}
	}
}
