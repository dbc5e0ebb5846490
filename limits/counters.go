package limits

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
)

// Counters is where a Limiter keeps its counters: NewMemory for one gateway, NewRedis
// for several sharing them. Its methods are the Limiter's business; the interface is
// closed to other implementations.
type Counters interface {
	// reserve decides every item of r together and reserves them all, or nothing: it
	// answers admitted, refused (items marked refused, with their waits) or needsSeed
	// (the budget items whose period counter is absent and carry no seed are marked).
	reserve(ctx context.Context, r *Reservation, now, lease int64) (outcome, error)
	// settle releases r (unless addOnly) and adds cost to each budget's settle period;
	// addOnly only adds, for the items marked needSeed. A settle period counter that is
	// absent is set from the item's settleSeed when known, else marked needSeed when seed is
	// true, else left absent.
	settle(ctx context.Context, r *Reservation, tokens, cost, now int64, addOnly, seed bool) error
	// peek reads each item's standing without changing it.
	peek(ctx context.Context, r *Reservation, now int64) error
	close() error
}

// outcome is what a backend's reserve answered.
type outcome uint8

const (
	admitted outcome = iota
	needsSeed
	refused
)

// backendError is a failure of the shared counters (not of the ledger).
type backendError struct{ err error }

func (e *backendError) Error() string { return "limits: shared counters: " + e.err.Error() }

// withoutAddress is a failure of the shared counters told without the server's address
// or host name (a dial error names both), so that it may be logged.
func withoutAddress(err error) error {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return errors.New("no answer within the timeout")
	case errors.As(err, &dns):
		return errors.New("host name lookup failed: " + dns.Err)
	case errors.As(err, &op):
		if op.Err != nil {
			return fmt.Errorf("%s: %w", op.Op, op.Err)
		}
		return errors.New(op.Op + " failed")
	}
	return err
}

func (e *backendError) Unwrap() error { return e.err }
