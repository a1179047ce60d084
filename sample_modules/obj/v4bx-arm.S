@ R_ARM_V4BX: gas emits it for BX Rm only for ARMv4T targets with --fix-v4bx.
@ The kernel rewrites each BX Rm into MOV<cond> PC, Rm.  The relocation has symbol index 0.
@ Assembled with: arm-linux-gnueabihf-gcc -c -march=armv4t -marm -Wa,--fix-v4bx
	.syntax unified
	.arm
	.text
	.global	v4bx_ret
	.type	v4bx_ret, %function
v4bx_ret:
	mov	r0, #0
	bx	lr				@ R_ARM_V4BX, cond AL
	.size	v4bx_ret, . - v4bx_ret

	.global	v4bx_cond
	.type	v4bx_cond, %function
v4bx_cond:
	cmp	r0, #0
	bxne	r3				@ R_ARM_V4BX, cond NE, Rm = r3
	bx	r12				@ R_ARM_V4BX, Rm = r12
	.size	v4bx_cond, . - v4bx_cond
