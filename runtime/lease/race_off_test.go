//go:build !race

package lease_test

const raceEnabled = false
