package templates

import "time"

// File is one generated file: every wrapper and decorator of a package.
type File struct {
	PkgPath, PkgName string
	// Imports names every package the file may import (path → name), each
	// name distinct; the file imports those its wrappers use.
	Imports    map[string]string
	Wrappers   []*Wrapper   // templates "func" and "method"
	Decorators []*Decorator // template "decorator"
}

// Param is one parameter of a wrapper. For a variadic last parameter Type is
// the element type.
type Param struct {
	Name     string
	Type     string
	Variadic bool
}

// NilCheck is a pointer on a key path that must be non-nil.
type NilCheck struct {
	Expr string // the pointer expression
	Text string // how the message names it, e.g. "req.Order"
	// Var, when set, is a local that is assigned Expr before the check
	// (Expr calls a method, which is then called once); the key's later
	// expressions use Var.
	Var string
}

// KeyPart is literal text or one {path} of a key template. A {path} has
// exactly one of Str, Value and Marshal.
type KeyPart struct {
	Lit string // literal text when the part has no value
	Src string // the part as written, e.g. "{req.Order.ID}"
	// Str is an expression of type string, the part's value before
	// escaping (string kinds, fmt.Stringer): the template escapes it with
	// lease.KeyPart.
	Str string
	// Value is an expression of type string that can never be empty and
	// needs no escaping (integers, bools).
	Value string
	// Marshal, when set, is an expression of type ([]byte, error) whose
	// bytes (escaped) are the part's value (encoding.TextMarshaler).
	Marshal   string
	NilChecks []NilCheck
	// NonEmpty makes an empty Str or Marshal value an error wrapping
	// lease.ErrBadKey (the directive has no allow-empty). Text names the
	// value in that message, e.g. "req.CustomerID".
	NonEmpty bool
	Text     string
	// StrVar, when set, is a local that holds Str, evaluated once (Str
	// calls a method and is checked for emptiness).
	StrVar string
	// Unconverted, when set, is Str without its conversion to string (a
	// named string type): the emptiness check compares it with "".
	Unconverted string
}

// HasValue reports whether the part is a {path} rather than literal text.
func (p KeyPart) HasValue() bool { return p.Str != "" || p.Value != "" || p.Marshal != "" }

// Spec is the lease.Spec the wrapper passes. TTL, Deadline, MinValidity
// and Name are always written; the others when they differ from zero.
type Spec struct {
	TTL, Deadline, Wait, MinValidity, HoldMin, Keep time.Duration
	Skip, Fence                                     bool
	Name                                            string // e.g. "orders.(*Server).chargeOrder"
}

// LeadSpec is the lease.LeadSpec a leader wrapper (template "leader")
// passes to lease.Client.Lead. TTL, MinValidity and Name are always
// written, Owner when set.
type LeadSpec struct {
	TTL, MinValidity time.Duration
	Owner            string // Go expression of the candidate's name, or "" (the runtime's default)
	Name             string
}

// Wrapper is one protected function, method or interface method.
type Wrapper struct {
	Template string   // registry name: "func", "method" or "leader" (decorator methods: "decorator")
	Name     string   // the wrapper's name
	Target   string   // the wrapped function or method's name
	Doc      []string // doc comment lines (without //)

	RecvName string // method wrappers: the receiver's name
	RecvType string // method wrappers: e.g. *Server

	TypeParams []Param // generic functions: name and constraint
	Params     []Param // the wrapper's parameters; Params[0] is the context
	// ClientParam is the index in Params of an added *lease.Client
	// parameter, or -1.
	ClientParam int
	Results     []string // result types; the last is error

	Key    []KeyPart
	Spec   Spec
	Lead   *LeadSpec // template "leader": the wrapper campaigns with Lead instead of calling Do
	Client string    // expression of the *lease.Client
	Call   string    // the function value to call, e.g. s.chargeOrder
	// Tie, when set, is a function-typed expression asserting the wrapped
	// signature TieType, so stale output fails to compile. For generic
	// targets (TypeParams set) it is an instantiation with the type
	// parameters, checked inside a generic func _.
	Tie, TieType string

	// Locals are identifiers allocated so they collide with no parameter.
	KeyVar, ErrVar string
	KeyErrVar      string // the error of MarshalText (when a part has Marshal)
	ResultVars     []string
	ScratchVars    []string // one per Marshal key part

	// Uses lists the import paths the text above refers to.
	Uses []string
	// Format asks for gofmt over the emitted code: its types hold struct
	// or interface literals of several elements, which gofmt spreads over
	// lines (rare; the text above writes them on one line).
	Format bool
}

// Decorator implements an interface by calling next, with leases around
// the annotated methods.
type Decorator struct {
	Iface    string // interface name
	IfaceTyp string // the interface type as the file writes it
	Ctor     string // NewLeased<Iface>
	Struct   string // the implementing type
	Recv     string // receiver name in its methods
	Next     string // field holding the wrapped value
	ClientF  string // field holding the *lease.Client
	Methods  []*Wrapper
	// Passthrough lists methods without a directive: name, params, results.
	Passthrough []*Wrapper
}
