package lease

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

// Errors returned by Do. Test them with errors.Is: the errors Do returns wrap
// these together with the underlying cause (a transport error, the function's
// own error, context.DeadlineExceeded).
//
// The classes of a failed acquire are exclusive: ErrBusy (a parsed "held by
// another"), ErrRefused (definitely not executed: nothing could be sent, or
// the server answered with an error), ErrUnknown (sent, but no reply was
// parsed: the lease may have been granted). Only ErrUnknown leaves a
// possible grant behind, and only then is a conditional release sent.
var (
	// ErrBusy: the lease was held by another owner for the whole wait.
	ErrBusy = errors.New("lease: busy")

	// ErrUnknown: a request was sent but no reply was read (timeout, EOF,
	// reset, cancelled context). The lease may or may not have been granted;
	// the function was not called and a conditional release was attempted.
	// A request never written to a connection (go-redis's dial retries or
	// handshake outlasting the call's budget, say) is ErrRefused instead.
	ErrUnknown = errors.New("lease: outcome unknown")

	// ErrRefused: the request was not carried out. Either no connection
	// could be made for it (dial or TLS failure, a closed or exhausted
	// go-redis client, a hook that failed it without sending it), or the
	// server answered with an error: NOPERM (ACL), READONLY (a replica),
	// OOM, WRONGTYPE, and so on. The error names the cause; the function
	// was not called and no release is sent. Usually a
	// deployment or configuration problem. When a reply is lost and
	// go-redis's retry then cannot connect (a dial error, a pool timeout),
	// or is answered with an error go-redis does not retry after (NOPERM,
	// OOM), the request (an acquire, a release, a renewal, ForceRelease's
	// end of a hold) had been written, so the outcome is ErrUnknown, not
	// this: the runtime counts the writes of its own arguments.
	// One limit, from go-redis: when such a retry gets an error reply that
	// go-redis retries after (READONLY after a failover, LOADING after a
	// restart) until its retries run out, only that reply is returned,
	// and nothing tells it from a request refused every time; it is
	// ErrRefused, although the first attempt may have been granted. Such a
	// grant, to an identity nobody uses, ends with its TTL. On a Cluster,
	// whose client also writes a request again to follow MOVED and ASK,
	// any error answer is taken as it comes.
	ErrRefused = errors.New("lease: refused")

	// ErrLost: the lease ended while the function ran (renewal refused, its
	// validity ran out, the function returned after it, or the release found
	// the key no longer ours). The function's context was cancelled with a
	// cause wrapping this error; its side effects may have run partly
	// unprotected.
	ErrLost = errors.New("lease: lost during work")

	// ErrDeadline: the call's total budget (Spec.Deadline or the caller's
	// deadline) ran out. It wraps context.DeadlineExceeded.
	ErrDeadline = deadlineError{}

	// ErrLowValidity: a grant arrived with less than Spec.MinValidity left
	// (or, for a nested call, the enclosing lease had less left); the
	// function was not called.
	ErrLowValidity = errors.New("lease: granted with too little validity left")

	// ErrBadKey: the key is empty, or a key part could not be built (for
	// example a nil pointer on the path of a generated key).
	ErrBadKey = errors.New("lease: bad key")

	// ErrClosed: the Client was closed. Calls waiting for a lease return it
	// at once when Close is called.
	ErrClosed = errors.New("lease: client closed")
)

type deadlineError struct{}

func (deadlineError) Error() string        { return "lease: total deadline exceeded" }
func (deadlineError) Unwrap() error        { return context.DeadlineExceeded }
func (deadlineError) Is(target error) bool { return target == ErrDeadline }

// outcome classifies the error of one request to Redis.
type outcome uint8

const (
	outUnknown  outcome = iota // sent (or possibly sent), no parsed reply
	outRefused                 // definitely not executed
	outRedirect                // not executed because of slot movement: retry within the budget
)

// classify tells what an error from go-redis proves about the request.
//
// A reply parsed as an error proves the script did not complete (the lease
// scripts make their decisive write last). Errors that arise before any
// byte of the request could reach the server (dial, TLS handshake, a closed
// or exhausted pool) prove it was not sent. go-redis may have sent an
// earlier attempt before the one that failed to dial; such a grant would be
// to an identity nobody uses, and it expires with its TTL.
func classify(err error) outcome {
	var ex executedError
	if errors.As(err, &ex) {
		return outUnknown
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		switch {
		case redis.HasErrorPrefix(err, "MOVED"), redis.HasErrorPrefix(err, "ASK"),
			redis.HasErrorPrefix(err, "TRYAGAIN"), redis.HasErrorPrefix(err, "CLUSTERDOWN"):
			return outRedirect
		}
		return outRefused
	}
	if notSent(err) {
		return outRefused
	}
	return outUnknown
}

// mayHaveMoved reports whether err, a request's, may come from a Cluster
// whose slot map changed under the Client (a node that failed, hung or
// was replaced, a slot that moved): anything but the server's own refusal
// of the request. The caller then reloads the slot map (reloadTopology):
// go-redis by itself does so only once a minute.
func mayHaveMoved(err error) bool {
	return err != nil && (classify(err) != outRefused || notSent(err))
}

// notSent reports errors that leave no request on the wire.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var (
		rh  tls.RecordHeaderError
		cv  *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		ci  x509.CertificateInvalidError
		alr tls.AlertError
	)
	if errors.As(err, &rh) || errors.As(err, &cv) || errors.As(err, &ua) ||
		errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &alr) {
		return true
	}
	return errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// executedError wraps an error that says nothing of a write that happened,
// or may have: the error of a request that followed one carried out (WAIT
// after a grant or a renewal; even an error reply such as NOPERM), or one
// that says no request is on the wire (a dial error, a pool timeout) for a
// command go-redis had written before (its re-send after a lost reply
// found no connection, and the first send may have been carried out). The
// outcome is unknown, never refused.
type executedError struct{ err error }

func (e executedError) Error() string { return e.err.Error() }
func (e executedError) Unwrap() error { return e.err }
