package lease

import (
	"context"
	"errors"
)

// Errors returned by Do. Test them with errors.Is: the errors Do returns wrap
// these together with the underlying cause (a transport error, the function's
// own error, context.DeadlineExceeded).
var (
	// ErrBusy: the lease was held by another owner for the whole wait.
	ErrBusy = errors.New("lease: busy")

	// ErrUnknown: a request was sent but no reply was read (timeout, EOF,
	// reset, cancelled context). The lease may or may not have been granted;
	// the function was not called and a conditional release was attempted.
	ErrUnknown = errors.New("lease: outcome unknown")

	// ErrLost: the lease ended while the function ran (renewal refused, or its
	// validity ran out). The function's context was cancelled with this cause;
	// its side effects may have run partly unprotected.
	ErrLost = errors.New("lease: lost during work")

	// ErrDeadline: the call's total budget (Spec.Deadline or the caller's
	// deadline) ran out. It wraps context.DeadlineExceeded.
	ErrDeadline = deadlineError{}

	// ErrLowValidity: a grant arrived with less than Spec.MinValidity left;
	// the function was not called and the lease was released.
	ErrLowValidity = errors.New("lease: granted with too little validity left")

	// ErrBadKey: the key is empty, or a key part could not be built (for
	// example a nil pointer on the path of a generated key).
	ErrBadKey = errors.New("lease: bad key")
)

type deadlineError struct{}

func (deadlineError) Error() string        { return "lease: total deadline exceeded" }
func (deadlineError) Unwrap() error        { return context.DeadlineExceeded }
func (deadlineError) Is(target error) bool { return target == ErrDeadline }
