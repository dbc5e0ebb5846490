// Package loopback finds free ports on 127.0.0.1 for the throwaway servers tests start
// (PostgreSQL, Redis).
package loopback

import (
	"errors"
	"net"
)

// FreePort returns a 127.0.0.1 port that was free a moment ago; the server started on it
// may still lose it to another process, so callers retry with a new one.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}
