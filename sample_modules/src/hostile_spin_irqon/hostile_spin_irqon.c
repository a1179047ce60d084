// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init spins with interrupts on, never scheduling, on a flag nothing sets:
 * only the soft-lockup watchdog (its hrtimer, every 4 s) notices: "BUG: soft lockup". */
#include <linux/module.h>

static int hostile_stop;
module_param(hostile_stop, int, 0);

static int __init hostile_init(void)
{
	pr_info("hostile_spin_irqon: spinning with interrupts on\n");
	while (!READ_ONCE(hostile_stop))
		cpu_relax();
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: spin with irqs on");
