// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init halts the machine (kernel_halt: machine_halt is not exported). */
#include <linux/module.h>
#include <linux/reboot.h>

static int __init hostile_init(void)
{
	kernel_halt();
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: kernel_halt() -> machine_halt()");
