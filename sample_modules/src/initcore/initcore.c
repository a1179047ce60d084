// SPDX-License-Identifier: GPL-2.0
/*
 * initcore: init code (.init.text) calling several core (.text) functions, so that
 * when init and core memory are placed far apart the init->core branches need PLTs.
 * Core functions never call back into init code.
 */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>

static unsigned int table[16];

/* Core helpers: noinline so the calls stay real branches between sections. */
static noinline unsigned int core_mix(unsigned int a, unsigned int b)
{
	return (a * 2654435761u) ^ (b + 0x9e3779b9u);
}

static noinline void core_fill(unsigned int seed)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(table); i++)
		table[i] = core_mix(seed, i);
}

static noinline unsigned int core_sum(void)
{
	unsigned int s = 0;
	int i;

	for (i = 0; i < ARRAY_SIZE(table); i++)
		s += table[i] >> 4;
	return s;
}

noinline unsigned int initcore_checksum(unsigned int seed)
{
	core_fill(seed);
	return core_sum() ^ core_mix(seed, 7);
}

static int __init initcore_init(void)
{
	unsigned int c1, c2;

	c1 = initcore_checksum(1);
	c2 = core_mix(c1, 3);
	pr_info("initcore: checksum=%u mixed=%u\n", c1, c2);
	return 0;
}

static void __exit initcore_exit(void)
{
	pr_info("initcore: unloaded, sum=%u\n", core_sum());
}

module_init(initcore_init);
module_exit(initcore_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: init/core cross-section calls");
