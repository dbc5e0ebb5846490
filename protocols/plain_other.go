//go:build !amd64 || purego

package protocols

// plainPrefix returns how many leading bytes of b are plain string bytes (see
// specialBytes). It may stop short of the first special byte, by less than 32 bytes, and
// short of b's end by less than 32; the caller reads on from there a word at a time.
func plainPrefix(b []byte) int { return plainPrefixWords(b) }
