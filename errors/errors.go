// Package errors is Cairn's one error type: every error that crosses a
// package boundary carries the operation, a Kind, the path it concerns and
// the underlying cause. Each edge (HTTP, gRPC, FUSE, S3) translates Kind with
// exactly one table.
//
// The package also forwards the standard library's Is, As, New, Join and
// Unwrap so that callers can import it in place of the standard package.
package errors

import (
	stderrors "errors"
	"fmt"
	"strings"
)

// Kind classifies an error. The list is append-only: values are sent over
// the wire (gRPC status details) and must keep their meaning.
type Kind uint8

const (
	Other           Kind = iota // unclassified
	Invalid                     // bad argument or malformed input
	NotExist                    // no such namespace, file or directory
	Exist                       // already exists
	NotEmpty                    // directory or namespace not empty
	IsDir                       // is a directory
	NotDir                      // a path component is not a directory
	Permission                  // authenticated, but not allowed
	Unauthenticated             // no or bad credentials
	Precondition                // If-Match and similar failed
	TooLarge                    // body or name over a limit
	Range                       // range not satisfiable
	Corrupt                     // checksum mismatch, damaged record
	IO                          // disk or network failure
	Unavailable                 // server down or overloaded; retry later
	ReadOnly                    // volume or mount is read-only
	NameTooLong                 // a path component is too long
	Stale                       // generation mismatch: stale replica or stale cache
	Canceled                    // caller went away
	BadDigest                   // content did not match the digest the caller sent
	NoSpace                     // a disk is full (ENOSPC); retry elsewhere or later
	DataLoss                    // data that should exist is lost on every replica
)

var kindNames = [...]string{
	Other: "other", Invalid: "invalid argument", NotExist: "does not exist",
	Exist: "already exists", NotEmpty: "not empty", IsDir: "is a directory",
	NotDir: "not a directory", Permission: "permission denied",
	Unauthenticated: "unauthenticated", Precondition: "precondition failed",
	TooLarge: "too large", Range: "range not satisfiable", Corrupt: "data corrupt",
	IO: "I/O error", Unavailable: "unavailable", ReadOnly: "read-only",
	NameTooLong: "name too long", Stale: "stale", Canceled: "canceled",
	BadDigest: "bad digest", NoSpace: "no space left", DataLoss: "data lost",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Op names an operation, like "volume.Write" or "meta.Rename".
type Op string

// Path is the path (ns/a/b) an error concerns.
type Path string

// Error is the error type of Cairn.
type Error struct {
	Op   Op
	Kind Kind
	Path Path
	Err  error // the cause; may be nil
}

// E builds an *Error from its arguments, in any order: an Op, a Kind, a
// Path, an error (the cause) or a string (a message, made into the cause).
// If the cause is itself an *Error with no Kind given here, its Kind is
// inherited so that classification survives wrapping.
func E(args ...any) error {
	if len(args) == 0 {
		panic("errors.E with no arguments")
	}
	e := &Error{}
	for _, a := range args {
		switch a := a.(type) {
		case Op:
			e.Op = a
		case Kind:
			e.Kind = a
		case Path:
			e.Path = a
		case *Error:
			cp := *a
			e.Err = &cp
		case error:
			e.Err = a
		case string:
			e.Err = stderrors.New(a)
		default:
			panic(fmt.Sprintf("errors.E: bad argument %T", a))
		}
	}
	if e.Kind == Other {
		e.Kind = KindOf(e.Err)
	}
	return e
}

// Errorf is E with a formatted message as the cause.
func Errorf(op Op, kind Kind, format string, args ...any) error {
	return &Error{Op: op, Kind: kind, Err: fmt.Errorf(format, args...)}
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(string(e.Op))
	}
	if e.Path != "" {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		b.WriteString(string(e.Path))
	}
	msg := ""
	if e.Err != nil {
		msg = e.Err.Error()
	}
	// Do not repeat the kind when the cause already says it.
	if e.Kind != Other && !strings.Contains(msg, e.Kind.String()) {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Kind.String())
	}
	if msg != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(msg)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Message is the error without its Op, for messages shown to users.
func (e *Error) Message() string {
	c := *e
	c.Op = ""
	c.Path = ""
	return c.Error()
}

// KindOf returns the Kind of the first *Error in err's chain, or Other.
func KindOf(err error) Kind {
	var e *Error
	for err != nil {
		if stderrors.As(err, &e) {
			if e.Kind != Other {
				return e.Kind
			}
			err = e.Err
			continue
		}
		return Other
	}
	return Other
}

// Is reports whether err has the given Kind. It is the usual test in Cairn:
// errors.Is(errors.NotExist, err).
func Is(kind Kind, err error) bool { return err != nil && KindOf(err) == kind }

// PathOf returns the Path of the first *Error in err's chain that has one.
func PathOf(err error) Path {
	var e *Error
	for err != nil && stderrors.As(err, &e) {
		if e.Path != "" {
			return e.Path
		}
		err = e.Err
	}
	return ""
}

// Forwarded from the standard library.
var (
	New    = stderrors.New
	As     = stderrors.As
	Join   = stderrors.Join
	Unwrap = stderrors.Unwrap
)

// IsErr is the standard library's errors.Is (renamed: Is tests a Kind here).
func IsErr(err, target error) bool { return stderrors.Is(err, target) }
