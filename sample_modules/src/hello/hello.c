// SPDX-License-Identifier: GPL-2.0
/* hello: the smallest realistic module: one pr_info on load, one on unload. */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>

static int answer = 42;
static const char *greeting = "world";

static int __init hello_init(void)
{
	pr_info("hello: loaded, answer=%d, greeting=%s\n", answer, greeting);
	return 0;
}

static void __exit hello_exit(void)
{
	pr_info("hello: unloaded\n");
}

module_init(hello_init);
module_exit(hello_exit);
MODULE_LICENSE("GPL");
MODULE_AUTHOR("armload");
MODULE_DESCRIPTION("armload sample: hello world");
