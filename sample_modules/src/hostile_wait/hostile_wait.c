// SPDX-License-Identifier: GPL-2.0
/* hostile (issue 33): init sleeps forever in wait_event (uninterruptible): the hung-task detector. */
#include <linux/module.h>
#include <linux/wait.h>

static DECLARE_WAIT_QUEUE_HEAD(hostile_wq);
static int hostile_cond;

static int __init hostile_init(void)
{
	wait_event(hostile_wq, READ_ONCE(hostile_cond));
	return 0;
}

module_init(hostile_init);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload hostile sample: init sleeping forever in wait_event");
