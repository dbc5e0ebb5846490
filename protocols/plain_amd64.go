//go:build amd64 && !purego

package protocols

import "golang.org/x/sys/cpu"

// plainPrefix returns how many leading bytes of b are plain string bytes (see
// specialBytes). It may stop short of the first special byte, by less than 32 bytes, and
// short of b's end by less than 32; the caller reads on from there a word at a time.
//
// Long prompts are mostly plain text, and this test is most of the scanner's time on
// them: with AVX2 it tests 32 bytes per instruction group, several times faster than
// the 8-byte words of portable Go.
func plainPrefix(b []byte) int {
	if hasAVX2 {
		return plainPrefixAVX2(b)
	}
	return plainPrefixWords(b)
}

var hasAVX2 = cpu.X86.HasAVX2

// plainPrefixAVX2 is plainPrefix in whole 32-byte blocks; it stops exactly at the first
// special byte of the first block holding one. Only for CPUs with AVX2.
//
//go:noescape
func plainPrefixAVX2(b []byte) int
