//go:build !race

package socket_test

const raceEnabled = false
