//go:build amd64 && !purego

package protocols

import "golang.org/x/sys/cpu"

// plainPrefix is plainPrefixWords, with 32 bytes per AVX2 compare where the CPU has it.
// Long prompts are mostly plain text, and this test is most of the scanner's time on
// them: AVX2 is several times faster than the 8-byte words of portable Go.
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
