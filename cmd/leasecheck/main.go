// Command leasecheck checks lock discipline around leasegen's //lease:
// directives. Run it directly or as a vet tool:
//
//	go run github.com/leasegen/leasegen/cmd/leasecheck ./...
//	go vet -vettool=$(which leasecheck) ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/leasegen/leasegen/gen/leasecheck"
)

func main() { singlechecker.Main(leasecheck.Analyzer) }
