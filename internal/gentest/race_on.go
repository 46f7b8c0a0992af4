//go:build race

package gentest

// raceFlag is what Flags adds to CrossFlags in a test binary built with -race.
const raceFlag = " -race"
