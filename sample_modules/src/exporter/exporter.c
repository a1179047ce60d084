// SPDX-License-Identifier: GPL-2.0
/* exporter: exports a GPL function and a plain data symbol for the importer sample. */
#include <linux/export.h>
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>

int armload_sample_counter = 100;
EXPORT_SYMBOL(armload_sample_counter);

int armload_sample_add(int a, int b)
{
	armload_sample_counter++;
	return a + b;
}
EXPORT_SYMBOL_GPL(armload_sample_add);

static int __init exporter_init(void)
{
	pr_info("exporter: loaded, counter=%d\n", armload_sample_counter);
	return 0;
}

static void __exit exporter_exit(void)
{
	pr_info("exporter: unloaded, counter=%d\n", armload_sample_counter);
}

module_init(exporter_init);
module_exit(exporter_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: exports a function and a variable");
