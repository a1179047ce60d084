// SPDX-License-Identifier: GPL-2.0
/* importer: uses the symbols exported by the exporter sample (load exporter first). */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>

extern int armload_sample_add(int a, int b);
extern int armload_sample_counter;

static int __init importer_init(void)
{
	int sum = armload_sample_add(40, 2);

	pr_info("importer: add(40,2)=%d counter=%d\n", sum, armload_sample_counter);
	return 0;
}

static void __exit importer_exit(void)
{
	armload_sample_counter = 0;
	pr_info("importer: unloaded\n");
}

module_init(importer_init);
module_exit(importer_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: imports symbols from exporter");
