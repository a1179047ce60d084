@ Interworking cases the kernel rejects ("unsupported interworking call"):
@   ARM BL/B to a Thumb function (S & 3 != 0), and Thumb BL/B.W to an ARM STT_FUNC (S & 1 == 0).
@ Plus the permitted cases next to them: ARM->ARM and Thumb->Thumb, and a Thumb BL to a
@ non-function symbol (STT_NOTYPE, assumed not to need interworking).
@ Assembled with: arm-linux-gnueabihf-gcc -c -march=armv7-a
	.syntax unified
	.arch	armv7-a

	.section .text.arm, "ax", %progbits
	.arm
	.global	arm_caller
	.type	arm_caller, %function
arm_caller:
	bl	thumb_callee			@ R_ARM_CALL  ARM -> Thumb: rejected
	b	thumb_callee			@ R_ARM_JUMP24 ARM -> Thumb: rejected
	bl	arm_callee			@ R_ARM_CALL  ARM -> ARM: fine
	bx	lr
	.size	arm_caller, . - arm_caller

	.global	arm_callee
	.type	arm_callee, %function
arm_callee:
	mov	r0, #1
	bx	lr
	.size	arm_callee, . - arm_callee

	.section .text.thumb, "ax", %progbits
	.thumb
	.global	thumb_caller
	.type	thumb_caller, %function
	.thumb_func
thumb_caller:
	push	{lr}
	bl	arm_callee			@ R_ARM_THM_CALL   Thumb -> ARM STT_FUNC: rejected
	b.w	arm_callee			@ R_ARM_THM_JUMP24 Thumb -> ARM STT_FUNC: rejected
	bl	thumb_callee			@ R_ARM_THM_CALL   Thumb -> Thumb: fine
	bl	arm_label			@ R_ARM_THM_CALL   to STT_NOTYPE: no interworking check
	pop	{pc}
	.size	thumb_caller, . - thumb_caller

	.global	thumb_callee
	.type	thumb_callee, %function
	.thumb_func
thumb_callee:
	movs	r0, #2
	bx	lr
	.size	thumb_callee, . - thumb_callee

	.section .text.arm2, "ax", %progbits
	.arm
	.global	arm_label
arm_label:
	bx	lr
