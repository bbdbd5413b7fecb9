package loadgen

import (
	"math"
	"time"
)

// histogram records durations in logarithmic buckets with about 1% relative
// width, so percentiles of an arbitrarily long run cost a fixed amount of
// memory. Values below one microsecond share bucket 0; values above
// histogramMax share the last bucket. It is not safe for concurrent use.
type histogram struct {
	counts []uint64
	count  uint64
	max    time.Duration
}

const (
	// histogramGrowth is the ratio between consecutive bucket bounds.
	histogramGrowth = 1.01
	// histogramMax is the largest value recorded exactly enough to matter.
	histogramMax = 2 * time.Hour
)

var (
	logGrowth        = math.Log(histogramGrowth)
	histogramBuckets = bucketOf(histogramMax) + 1
)

// bucketOf returns the index of the bucket holding d.
func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	return 1 + int(math.Log(us)/logGrowth)
}

// bucketValue returns a representative value of bucket i: the geometric
// middle of its bounds, within half a bucket width of every value in it.
func bucketValue(i int) time.Duration {
	if i == 0 {
		return 0
	}
	us := math.Pow(histogramGrowth, float64(i-1)+0.5)
	return time.Duration(us * float64(time.Microsecond))
}

// record adds one observation.
func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if h.counts == nil {
		h.counts = make([]uint64, histogramBuckets)
	}
	i := bucketOf(d)
	if i >= len(h.counts) {
		i = len(h.counts) - 1
	}
	h.counts[i]++
	h.count++
	if d > h.max {
		h.max = d
	}
}

// quantile returns the nearest-rank q-quantile (0 < q <= 1), or 0 when
// nothing was recorded. The answer is within about 0.5% of the true value and
// never above the largest recorded value.
// Values beyond histogramMax report the largest recorded value.
func (h *histogram) quantile(q float64) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == len(h.counts)-1 {
				// The last bucket also holds everything beyond histogramMax.
				return h.max
			}
			return min(bucketValue(i), h.max)
		}
	}
	return h.max
}

// summary reports the count, p50, p99 and max in milliseconds.
func (h *histogram) summary() Percentiles {
	return Percentiles{
		Count: h.count,
		P50:   millis(h.quantile(0.50)),
		P99:   millis(h.quantile(0.99)),
		Max:   millis(h.max),
	}
}

// millis converts d to milliseconds rounded to two decimals.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*100) / 100
}
