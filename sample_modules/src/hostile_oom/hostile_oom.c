// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init allocates pages and never frees them, until the kernel has none. */
#include <linux/gfp.h>
#include <linux/module.h>

static int __init hostile_init(void)
{
	unsigned long n = 0;

	while (__get_free_page(GFP_KERNEL))
		n++;
	pr_info("hostile_oom: %lu pages, then none\n", n);
	return -ENOMEM;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: allocate until out of memory");
