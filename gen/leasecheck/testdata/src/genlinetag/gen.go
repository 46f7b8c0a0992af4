//go:build generate

package genlinetag

//go:generate ../../bin/leasegen
