// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): a work item that queues itself again every time it runs; exit cancels it. */
#include <linux/module.h>
#include <linux/workqueue.h>

static unsigned long hostile_runs;

static void hostile_fn(struct work_struct *w)
{
	hostile_runs++;
	schedule_work(w);
}
static DECLARE_WORK(hostile_work, hostile_fn);

static int __init hostile_init(void)
{
	schedule_work(&hostile_work);
	return 0;
}

static void __exit hostile_exit(void)
{
	cancel_work_sync(&hostile_work);
	pr_info("hostile_requeue: ran %lu times\n", hostile_runs);
}

module_init(hostile_init);
module_exit(hostile_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: self-requeueing work");
