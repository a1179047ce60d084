// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init restarts the machine. */
#include <linux/module.h>
#include <linux/reboot.h>

static int __init hostile_init(void)
{
	kernel_restart(NULL);
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: kernel_restart()");
