// Package adv19ordother has an unrelated, unprotected function named
// like another package's wrapper.
package adv19ordother

import "context"

func Credit(ctx context.Context) error { return nil }
