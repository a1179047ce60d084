// SPDX-License-Identifier: GPL-2.0
/* nullderef (deliberately broken): init reads through a NULL pointer -> data abort. */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>

static int * volatile nullderef_ptr;	/* zero-initialised, opaque to the optimiser */

static int __init nullderef_init(void)
{
	int v;

	pr_info("nullderef: about to read *NULL\n");
	v = *(volatile int *)nullderef_ptr;
	pr_info("nullderef: read %d (should not happen)\n", v);
	return 0;
}

static void __exit nullderef_exit(void)
{
}

module_init(nullderef_init);
module_exit(nullderef_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample (broken): NULL pointer dereference in init");
