package channel

import (
	"slices"
	"sync"
	"sync/atomic"
)

// RuntimeSecrets is implemented by a channel that obtains credentials while it runs (an
// OAuth2 access token, an Entra ID token, keys from AWS's default chain): they are
// masked in its candidate's answers like the configured ones in Secrets.
type RuntimeSecrets interface {
	// RuntimeSecrets are the credentials obtained lately. The slice is not modified
	// afterwards; the caller must not modify it either.
	RuntimeSecrets() []string
}

// Obtained remembers the credentials a channel obtained, for RuntimeSecrets. It keeps
// the current set and the one before only: tokens rotate for as long as the gateway
// runs, and a request sent just before a rotation is answered after it, so the previous
// set must still be masked, but no older one can be in an answer still to come. The
// zero value is ready to use and safe for concurrent use.
type Obtained struct {
	mu    sync.Mutex
	noted []string                 // the values of the last Note, as given
	cur   []string                 // those of them long enough to mask
	both  atomic.Pointer[[]string] // cur then the set before it, for Secrets
}

// Note records the credentials just obtained (values shorter than three bytes, which
// would mask ordinary text, are left out). Noting the current set again changes
// nothing, so a channel may note what it uses on every request.
func (o *Obtained) Note(values ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Equal(values, o.noted) {
		return
	}
	o.noted = slices.Clone(values)
	set := make([]string, 0, len(values))
	for _, v := range values {
		if len(v) >= 3 {
			set = append(set, v)
		}
	}
	both := append(slices.Clip(set), o.cur...)
	o.cur = set
	o.both.Store(&both)
}

// Secrets are the current and previous sets noted; nil before any.
func (o *Obtained) Secrets() []string {
	if p := o.both.Load(); p != nil {
		return *p
	}
	return nil
}
