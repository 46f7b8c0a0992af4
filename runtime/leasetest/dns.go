package leasetest

import (
	"context"
	"net"
)

// UseDNS makes this process ask the DNS server at addr (UDP) for every
// name that /etc/hosts does not hold, through Go's own resolver. Call it
// before anything resolves a name (in TestMain, or first thing in a child
// process): net.DefaultResolver is swapped, and a swap while go-redis
// clients dial races with them.
//
// go-redis v9.22.0 looks a client's address up in DNS as it makes the
// client, for up to 2 s whatever the caller's deadline (a failover
// client's address is the name "FailoverClient"); a test that times such
// a client can choose the resolver it runs against with this.
func UseDNS(addr string) {
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
}

// SilentDNS is UseDNS with a server that never answers: a UDP socket of
// the process's own that nothing reads, open until the process ends.
// Every lookup of a name not in /etc/hosts then lasts until its context
// ends.
func SilentDNS() error {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	UseDNS(pc.LocalAddr().String())
	return nil
}
