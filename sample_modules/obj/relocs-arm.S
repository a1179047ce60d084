@ ARM (A32) relocation coverage for armload's relocation unit tests.
@ Every type the kernel's ARM apply_relocate handles in ARM state, against undefined (external)
@ symbols and local symbols in other sections, with zero and non-zero addends.
@ Assembled with: arm-linux-gnueabihf-gcc -c -march=armv7-a -marm -Wa,-mfix-v4bx
	.syntax unified
	.arch	armv7-a
	.arm

	.text
	.global	arm_relocs
	.type	arm_relocs, %function
arm_relocs:
	.fnstart
	push	{r4, lr}
	@ R_ARM_CALL: zero addend (imm24 = 0xfffffe, A = -8) and non-zero addend
	bl	ext_func
	bl	ext_func+8
	bl	other_func			@ local function in .text.other
	blne	ext_func			@ conditional BL -> R_ARM_JUMP24
	@ R_ARM_JUMP24: unconditional and conditional B
	beq	ext_func
	b	ext_func2+0x100
	@ R_ARM_PC24 (old-style, forced with .reloc on a B whose imm24 encodes A = -8)
	.reloc	., R_ARM_PC24, ext_func
	b	.
	.reloc	., R_ARM_PC24, other_func
	bl	.
	@ R_ARM_MOVW_ABS_NC / R_ARM_MOVT_ABS
	movw	r0, #:lower16:ext_data
	movt	r0, #:upper16:ext_data
	movw	r1, #:lower16:(ext_data+0x1234)
	movt	r1, #:upper16:(ext_data+0x1234)
	movw	r2, #:lower16:local_data	@ local symbol in .data
	movt	r2, #:upper16:local_data
	movw	r3, #:lower16:(local_ro+0x10)
	movt	r3, #:upper16:(local_ro+0x10)
	@ R_ARM_MOVW_PREL_NC / R_ARM_MOVT_PREL (PC-relative: sym - .)
	movw	r0, #:lower16:(ext_data - .)
	movt	r0, #:upper16:(ext_data - .)
	movw	r1, #:lower16:(ext_data + 0x20 - .)
	movt	r1, #:upper16:(ext_data + 0x20 - .)
	movw	r2, #:lower16:(local_data - .)
	movt	r2, #:upper16:(local_data - .)
	pop	{r4, lr}
	@ R_ARM_V4BX (from -mfix-v4bx)
	bx	lr
	.fnend
	.size	arm_relocs, . - arm_relocs

	.type	arm_leaf, %function
arm_leaf:				@ a second unwind entry (PREL31 against .text + addend)
	.fnstart
	mov	r0, #0
	bx	lr
	.fnend
	.size	arm_leaf, . - arm_leaf

	.section .text.other, "ax", %progbits
	.type	other_func, %function
other_func:
	.fnstart
	b	ext_func			@ JUMP24 from a second exec section
	.fnend
	.size	other_func, . - other_func

	.section .rodata, "a", %progbits
	.align	2
local_ro:
	.word	0x11111111, 0x22222222, 0x33333333, 0x44444444, 0x55555555

	.data
	.align	2
	.global	arm_data_relocs
arm_data_relocs:
	@ R_ARM_ABS32
	.word	ext_data
	.word	ext_data+0x10
	.word	other_func			@ local function in another section
	.word	local_ro+8			@ local data in another section (section symbol + addend)
	@ R_ARM_TARGET1 (treated as ABS32)
	.word	ext_func(target1)
	.word	local_ro+4(target1)
	@ R_ARM_REL32
	.word	ext_data - .
	.word	ext_data + 0x40 - .
	.word	local_ro - .
	@ R_ARM_PREL31 outside .ARM.exidx (bit 31 of the place must be preserved)
	.reloc	., R_ARM_PREL31, ext_func
	.word	0x80000000
	.reloc	., R_ARM_PREL31, other_func
	.word	0x00000010
local_data:
	.word	0
	@ R_ARM_NONE (as the unwinder's personality routine markers are)
	.reloc	., R_ARM_NONE, ext_data
	.word	0
