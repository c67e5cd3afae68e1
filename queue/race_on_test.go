//go:build race

package queue_test

// raceEnabled: the race detector slows every goroutine switch, so timing
// bounds are relaxed under it.
const raceEnabled = true
