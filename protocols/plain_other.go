//go:build !amd64 || purego

package protocols

// plainPrefix is plainPrefixWords: this platform has no assembly for it, or the purego
// tag asks for none.
func plainPrefix(b []byte) int { return plainPrefixWords(b) }
