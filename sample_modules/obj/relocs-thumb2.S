@ Thumb-2 (T32) relocation coverage: THM_CALL, THM_JUMP24 and the four Thumb MOVW/MOVT types,
@ against external symbols and local symbols in other sections, zero and non-zero addends.
@ Assembled with: arm-linux-gnueabihf-gcc -c -march=armv7-a -mthumb
	.syntax unified
	.arch	armv7-a
	.thumb

	.text
	.global	thumb_relocs
	.type	thumb_relocs, %function
	.thumb_func
thumb_relocs:
	.fnstart
	push	{r4, lr}
	@ R_ARM_THM_CALL: zero addend (A = -4) and non-zero addend
	bl	ext_func
	bl	ext_func+8
	bl	thumb_other			@ local Thumb function in .text.other
	@ R_ARM_THM_JUMP24 (B.W)
	b.w	ext_func2
	b.w	ext_func2+0x40
	b.w	thumb_other
	@ R_ARM_THM_MOVW_ABS_NC / R_ARM_THM_MOVT_ABS
	movw	r0, #:lower16:ext_data
	movt	r0, #:upper16:ext_data
	movw	r1, #:lower16:(ext_data+0x1234)
	movt	r1, #:upper16:(ext_data+0x1234)
	movw	r2, #:lower16:local_data
	movt	r2, #:upper16:local_data
	movw	r3, #:lower16:thumb_other	@ Thumb function: S has bit 0 set
	movt	r3, #:upper16:thumb_other
	@ R_ARM_THM_MOVW_PREL_NC / R_ARM_THM_MOVT_PREL
	movw	r0, #:lower16:(ext_data - .)
	movt	r0, #:upper16:(ext_data - .)
	movw	r1, #:lower16:(ext_data + 0x20 - .)
	movt	r1, #:upper16:(ext_data + 0x20 - .)
	movw	r2, #:lower16:(local_data - .)
	movt	r2, #:upper16:(local_data - .)
	pop	{r4, pc}
	.fnend
	.size	thumb_relocs, . - thumb_relocs

	.section .text.other, "ax", %progbits
	.type	thumb_other, %function
	.thumb_func
thumb_other:
	.fnstart
	bl	ext_func
	b.w	ext_func+4
	.fnend
	.size	thumb_other, . - thumb_other

	.data
	.align	2
	.global	thumb_data_relocs
thumb_data_relocs:
	.word	ext_data			@ R_ARM_ABS32
	.word	thumb_other			@ ABS32 to a Thumb function (value has bit 0 set)
	.word	thumb_other+4
local_data:
	.word	0
