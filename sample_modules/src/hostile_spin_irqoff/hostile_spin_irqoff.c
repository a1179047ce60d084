// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init spins with interrupts off on a flag nothing sets. No interrupt or
 * timer can end it; the Debian armhf kernel has no hard-lockup detector: it hangs silently. */
#include <linux/irqflags.h>
#include <linux/module.h>

static int hostile_stop;
module_param(hostile_stop, int, 0);

static int __init hostile_init(void)
{
	pr_info("hostile_spin_irqoff: spinning with interrupts off\n");
	local_irq_disable();
	while (!READ_ONCE(hostile_stop))
		cpu_relax();
	local_irq_enable();
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: spin with irqs off");
