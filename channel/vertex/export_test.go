package vertex

import "time"

// SetTokenTimeout shortens the bound on one token fetch for a test; channels made after
// it use it.
func SetTokenTimeout(t interface{ Cleanup(func()) }, d time.Duration) {
	old := tokenTimeout
	tokenTimeout = d
	t.Cleanup(func() { tokenTimeout = old })
}
