// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init writes into the kernel's text (read-only: STRICT_KERNEL_RWX). */
#include <linux/delay.h>
#include <linux/module.h>

static int __init hostile_init(void)
{
	*(volatile unsigned int *)msleep = 0xe7f001f2;
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: write into kernel text");
