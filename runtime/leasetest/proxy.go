package leasetest

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Fault is what a Proxy does to replies (server to client).
type Fault int

const (
	// Pass forwards replies unchanged.
	Pass Fault = iota
	// Blackhole forwards requests but never delivers replies; connections
	// stay open, so the client sees a timeout.
	Blackhole
	// CutNextReply drops the next reply chunk and closes that connection:
	// the request ran on the server, the client sees EOF. The proxy then
	// returns to Pass.
	CutNextReply
	// Delay delivers each reply after the proxy's delay (see SetDelay).
	Delay
)

// Proxy is a TCP proxy on a loopback port that injects faults into the
// replies of a server, for tests of unknown outcomes.
type Proxy struct {
	ln     net.Listener
	target string
	done   chan struct{} // closed by Close: delayed replies stop waiting

	mu       sync.Mutex
	fault    Fault
	delay    time.Duration
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
	cut      int    // replies cut so far
	accepted int    // connections accepted so far
	newFault *Fault // the fault of connections accepted from now on (nil: follow Set)
}

// StartProxy starts a proxy to target and closes it when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatalf("leasetest: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the fault applied to replies from now on.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// SetDelay sets the Delay fault's delay and switches to it.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.fault, p.delay = Delay, d
	p.mu.Unlock()
}

// SetNew makes connections accepted from now on apply f to their replies,
// whatever Set says later; connections already open keep following Set.
// A client with warm pooled connections keeps working while a connection it
// opens now (a subscription, a reconnect) suffers f.
func (p *Proxy) SetNew(f Fault) {
	p.mu.Lock()
	p.newFault = &f
	p.mu.Unlock()
}

// Cut returns how many replies CutNextReply has dropped.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Accepted returns how many client connections the proxy has accepted: a
// client that drops a timed-out connection and dials again shows up here.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// CloseConns closes every open connection (both sides), as a network reset.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// Refuse closes the proxy's listener: new connections are refused, while
// open ones go on following Set (a server that stopped accepting, or a
// network path that lets established connections through). Close still
// closes them.
func (p *Proxy) Refuse() error { return p.ln.Close() }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.CloseConns()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil // refused already (Refuse)
	}
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		own := p.newFault
		p.mu.Unlock()
		server, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(server, client)
			p.untrack(server)
			p.untrack(client)
		}()
		go func() {
			defer p.wg.Done()
			p.replies(server, client, own)
			p.untrack(server)
			p.untrack(client)
		}()
	}
}

// replies copies server->client chunk by chunk, applying the proxy's fault
// (or the connection's own, when it has one).
func (p *Proxy) replies(server, client net.Conn, own *Fault) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			fault, delay := p.fault, p.delay
			if own != nil {
				fault = *own
			}
			if fault == CutNextReply && own == nil {
				p.fault = Pass
				p.cut++
			}
			p.mu.Unlock()
			switch fault {
			case Blackhole:
				continue
			case CutNextReply:
				return
			case Delay:
				// Not a plain sleep: Close must not wait out a long delay.
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-p.done:
					t.Stop()
					return
				}
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
