// Command leasecheck checks lock discipline around leasegen's //lease:
// directives. Add it to a module with
// go get -tool github.com/leasegen/leasegen/cmd/leasecheck, then run it
// directly or as a vet tool:
//
//	go tool leasecheck ./...
//	go vet -vettool="$(go tool -n leasecheck)" ./...
//
// Not -vettool=$(which leasecheck): without leasecheck on PATH that is an
// empty -vettool, and go vet silently runs only its own checks.
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/leasegen/leasegen/gen/leasecheck"
)

func main() { singlechecker.Main(leasecheck.Analyzer) }
