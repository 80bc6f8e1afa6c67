package errorfs

import (
	"strings"
	"sync/atomic"
	"syscall"
)

// Nth fails the nth call (1-based) of op on a file whose name ends in
// suffix ("" for any) with err, and lets every other call through.
func Nth(op Op, suffix string, n int, err error) Rule { return calls(op, suffix, n, n, err) }

// From fails every call of op on a file whose name ends in suffix, from the
// nth on, with err: a disk that went bad and stays bad.
func From(op Op, suffix string, n int, err error) Rule { return calls(op, suffix, n, -1, err) }

// calls fails the calls from first to last (-1: no end) of op on files
// whose names end in suffix.
func calls(op Op, suffix string, first, last int, err error) Rule {
	seen := 0
	return func(c Call) *Fault {
		if c.Op != op || !strings.HasSuffix(c.Name, suffix) {
			return nil
		}
		seen++
		if seen >= first && (last < 0 || seen <= last) {
			return &Fault{Err: err}
		}
		return nil
	}
}

// Full is a disk with budget bytes free: writes go through until they have
// used it, the one that crosses it is torn where the space ends, and every
// write after fails with ENOSPC until Free is called.
type Full struct {
	budget atomic.Int64
}

// NewFull returns a disk with budget bytes free.
func NewFull(budget int64) *Full {
	d := &Full{}
	d.budget.Store(budget)
	return d
}

// Free gives the disk n more bytes (space freed elsewhere).
func (d *Full) Free(n int64) { d.budget.Add(n) }

// Rule is the disk's rule. Rules run one at a time, so only Free races it.
func (d *Full) Rule(c Call) *Fault {
	if c.Op != Write {
		return nil
	}
	if d.budget.Add(-int64(c.Len)) >= 0 {
		return nil
	}
	left := d.budget.Add(int64(c.Len)) // undo; what was left is torn off
	d.budget.Add(-max(left, 0))
	return &Fault{Err: syscall.ENOSPC, Tear: int(max(left, 0))}
}

// TearNth tears the nth write (1-based) to a file whose name ends in
// suffix after keep bytes, failing it with EIO: a write cut by a crash or
// a failing device.
func TearNth(suffix string, n, keep int) Rule {
	seen := 0
	return func(c Call) *Fault {
		if c.Op != Write || !strings.HasSuffix(c.Name, suffix) {
			return nil
		}
		seen++
		if seen == n {
			return &Fault{Err: syscall.EIO, Tear: keep}
		}
		return nil
	}
}

// Any applies rules in order; the first fault wins.
func Any(rules ...Rule) Rule {
	return func(c Call) *Fault {
		for _, r := range rules {
			if f := r(c); f != nil {
				return f
			}
		}
		return nil
	}
}
