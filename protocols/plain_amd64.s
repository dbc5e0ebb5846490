//go:build amd64 && !purego

#include "textflag.h"

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

	MOVL $0x22, DX
	MOVQ DX, X1
	VPBROADCASTB X1, Y1
	MOVL $0x5c, DX
	MOVQ DX, X2
	VPBROADCASTB X2, Y2
	MOVL $0x20, DX
	MOVQ DX, X3
	VPBROADCASTB X3, Y3
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
