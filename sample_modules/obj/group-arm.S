@ ARM group relocations (CONFIG_ARM_HAS_GROUP_RELOCS): the ADD/ADD/LDR PC-relative sequence
@ the kernel's __ldst_va / ldr_va macros emit (arch/arm/include/asm/assembler.h).
@ Assembled with: arm-linux-gnueabihf-gcc -c -march=armv7-a -marm
	.syntax unified
	.arch	armv7-a
	.arm

	.text
	.global	group_relocs
	.type	group_relocs, %function
group_relocs:
	@ external symbol, zero addend (the kernel form: sym - (label + 8) folded by gas into PC bias)
.L0:	add	r0, pc, #:pc_g0_nc:(ext_var - 8)
	add	r0, r0, #:pc_g1_nc:(ext_var - 4)
	ldr	r0, [r0, #:pc_g2:(ext_var)]
	@ external symbol, non-zero addend
	add	r1, pc, #:pc_g0_nc:(ext_var + 0x100 - 8)
	add	r1, r1, #:pc_g1_nc:(ext_var + 0x100 - 4)
	ldr	r1, [r1, #:pc_g2:(ext_var + 0x100)]
	@ local symbol in another section
	add	r2, pc, #:pc_g0_nc:(local_var - 8)
	add	r2, r2, #:pc_g1_nc:(local_var - 4)
	ldr	r2, [r2, #:pc_g2:(local_var)]
	bx	lr
	.size	group_relocs, . - group_relocs

	.data
	.align	2
	.word	0
local_var:
	.word	0x12345678
