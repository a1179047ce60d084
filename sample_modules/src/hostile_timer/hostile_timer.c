// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): a timer that re-arms itself for the next jiffy every time it fires. */
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/timer.h>

static struct timer_list hostile_t;
static unsigned long hostile_fired;

static void hostile_fn(struct timer_list *t)
{
	hostile_fired++;
	mod_timer(t, jiffies + 1);
}

static int __init hostile_init(void)
{
	timer_setup(&hostile_t, hostile_fn, 0);
	mod_timer(&hostile_t, jiffies + 1);
	return 0;
}

static void __exit hostile_exit(void)
{
	del_timer_sync(&hostile_t);
	pr_info("hostile_timer: fired %lu times\n", hostile_fired);
}

module_init(hostile_init);
module_exit(hostile_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: timer re-arming every jiffy");
