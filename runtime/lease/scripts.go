package lease

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	// token.lua is takeTok, the fencing token's minting, which both the
	// acquire and the release (a handover) do: put before each.
	//go:embed token.lua
	tokenSrc string

	// Scripts run with EVALSHA and fall back to EVAL on NOSCRIPT (after a
	// restart or SCRIPT FLUSH); all three are safe to replay.
	acquireScript = newScript(tokenSrc + acquireSrc)
	renewScript   = redis.NewScript(renewSrc)
	releaseScript = newScript(tokenSrc + releaseSrc)
)
