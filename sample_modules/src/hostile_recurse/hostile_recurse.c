// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): unbounded recursion: the 8 KiB vmapped stack (CONFIG_VMAP_STACK) overflows. */
#include <linux/module.h>

static noinline int hostile_down(int n)
{
	volatile char frame[128];

	frame[0] = n;
	return hostile_down(n + 1) + frame[0];
}

static int __init hostile_init(void)
{
	return hostile_down(0);
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: unbounded recursion");
