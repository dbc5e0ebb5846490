//go:build amd64 && !purego

#include "textflag.h"

// The bytes the block test compares with: '"', '\\', and the bound 0x20.
DATA plainSpecials<>+0(SB)/1, $0x22
DATA plainSpecials<>+1(SB)/1, $0x5c
DATA plainSpecials<>+2(SB)/1, $0x20
GLOBL plainSpecials<>(SB), RODATA|NOPTR, $3

// func plainPrefixAVX2(b []byte) int
//
// A byte is special when it is '"', '\\', or, compared as a signed byte, below 0x20:
// that is every control character and every byte of 0x80 and above.
TEXT ·plainPrefixAVX2(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), CX
	XORQ AX, AX
	CMPQ CX, $32
	JB   short

	// VEX-encoded from memory: a legacy SSE move into an XMM register here would pay
	// the CPU's SSE/AVX transition on every call.
	VPBROADCASTB plainSpecials<>+0(SB), Y1
	VPBROADCASTB plainSpecials<>+1(SB), Y2
	VPBROADCASTB plainSpecials<>+2(SB), Y3
	SUBQ $32, CX // the last offset at which a whole block starts

block:
	VMOVDQU  (SI)(AX*1), Y0
	VPCMPEQB Y0, Y1, Y4 // '"'
	VPCMPEQB Y0, Y2, Y5 // '\\'
	VPCMPGTB Y0, Y3, Y6 // 0x20 > byte, signed
	VPOR     Y4, Y5, Y4
	VPOR     Y4, Y6, Y4
	VPMOVMSKB Y4, DX
	TESTL    DX, DX
	JNZ      found
	ADDQ     $32, AX
	CMPQ     AX, CX
	JLE      block
	VZEROUPPER
	MOVQ     AX, ret+24(FP)
	RET

found:
	BSFL DX, DX
	ADDQ DX, AX
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

short:
	MOVQ AX, ret+24(FP)
	RET
