package directives

import "context"

// lease:lock k deadline=5s // want `no space allowed between // and lease:lock`
func a(ctx context.Context) error { return nil }

/* want `unknown option "tll" \(did you mean ttl\?\)` */ //lease:lock k:{id} tll=1s deadline=5s
func b(ctx context.Context, id string) error {
	return nil
}

/* want `key part \{orderId\}: no parameter orderId \(did you mean orderID\?\)` */ //lease:lock k:{orderId} deadline=5s
func c(ctx context.Context, orderID string) error {
	return nil
}

/* want `//lease:lock on a declaration` */ //lease:lock k deadline=5s
var x = 1

/* want `malformed directive "//Lease:Lock": directives are lower case \(write //lease:lock\)` */ //Lease:Lock k deadline=5s
func d(ctx context.Context) error {
	return nil
}

func e(ctx context.Context) error {
	/* want `//lease:ignore escape needs a reason` */ //lease:ignore escape
	return nil
}

/* want `option deadline= does not apply to //lease:leader: a leader runs until its context ends` */ //lease:leader k deadline=5s
func f(ctx context.Context) error {
	return nil
}

// lease:leader k // want `no space allowed between // and lease:leader`
func g(ctx context.Context) error { return nil }
