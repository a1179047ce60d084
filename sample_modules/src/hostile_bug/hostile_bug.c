// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init hits BUG(). */
#include <linux/bug.h>
#include <linux/module.h>

static int __init hostile_init(void)
{
	BUG();
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: BUG()");
