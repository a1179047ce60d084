// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init writes into another module's memory: the exporter sample's counter
 * (its data: allowed, silently) and then its function's code (read-only after load: an oops). */
#include <linux/module.h>

extern int armload_sample_counter;
int armload_sample_add(int a, int b);

static int __init hostile_init(void)
{
	armload_sample_counter = 0x0badf00d;
	*(volatile unsigned int *)armload_sample_add = 0xe7f001f2;
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: write into another module");
