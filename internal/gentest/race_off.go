//go:build !race

package gentest

const race = false

const flags = "-mod=mod"
