// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init is fine; exit never returns (sleeps a second at a time, forever). */
#include <linux/delay.h>
#include <linux/module.h>

static int __init hostile_init(void)
{
	return 0;
}

static void __exit hostile_exit(void)
{
	pr_info("hostile_exit_hang: exit never returns\n");
	for (;;)
		msleep(1000);
}

module_init(hostile_init);
module_exit(hostile_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: exit that never returns");
