// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init panics. */
#include <linux/module.h>
#include <linux/panic.h>

static int __init hostile_init(void)
{
	panic("hostile_panic: asked to panic");
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: panic()");
