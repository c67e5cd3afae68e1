//go:build race

package socket_test

// raceEnabled: the race detector multiplies memory, so memory bounds are
// checked without it.
const raceEnabled = true
