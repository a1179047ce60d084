// SPDX-License-Identifier: GPL-2.0
/* spin (deliberately broken): init never returns. */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>
#include <asm/processor.h>

static volatile unsigned long spin_count;

static int __init spin_init(void)
{
	pr_info("spin: spinning forever\n");
	for (;;) {
		spin_count++;
		cpu_relax();
	}
	return 0;
}

static void __exit spin_exit(void)
{
}

module_init(spin_init);
module_exit(spin_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample (broken): infinite loop in init");
