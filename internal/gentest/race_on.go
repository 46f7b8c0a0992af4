//go:build race

package gentest

const race = true

const flags = "-mod=mod -race"
