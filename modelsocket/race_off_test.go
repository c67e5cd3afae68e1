//go:build !race

package modelsocket_test

const raceEnabled = false
