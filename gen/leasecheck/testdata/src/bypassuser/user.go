package bypassuser

import (
	"context"

	"bypass"
)

func run() {
	_ = bypass.Nightly(context.Background()) // want `lease: call to Nightly bypasses its lease: call NightlyLeased instead`
}
