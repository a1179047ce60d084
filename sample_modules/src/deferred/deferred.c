// SPDX-License-Identifier: GPL-2.0
/* deferred: work that runs after init returns, and init waiting on some of it.
 * A timer, a work item, a delayed work item, a tasklet and a kthread each print when they run
 * with the jiffies they see; init waits for the work item through a completion and sleeps. */
#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/init.h>
#include <linux/interrupt.h>
#include <linux/jiffies.h>
#include <linux/kthread.h>
#include <linux/module.h>
#include <linux/timer.h>
#include <linux/workqueue.h>

static struct timer_list deferred_timer;
static struct work_struct deferred_work;
static struct delayed_work deferred_dwork;
static struct tasklet_struct deferred_tasklet;
static struct task_struct *deferred_thread;
static DECLARE_COMPLETION(work_done);
static unsigned long start;
static int ran;

static void timer_fn(struct timer_list *t)
{
	ran |= 1;
	pr_info("deferred: timer after %lu jiffies\n", jiffies - start);
}

static void work_fn(struct work_struct *w)
{
	ran |= 2;
	pr_info("deferred: work item\n");
	complete(&work_done);
}

static void dwork_fn(struct work_struct *w)
{
	ran |= 4;
	pr_info("deferred: delayed work after %lu jiffies\n", jiffies - start);
}

static void tasklet_fn(struct tasklet_struct *t)
{
	ran |= 8;
	pr_info("deferred: tasklet\n");
}

static int thread_fn(void *data)
{
	ran |= 16;
	pr_info("deferred: kthread '%s'\n", (char *)data);
	return 0;
}

static int __init deferred_init(void)
{
	start = jiffies;
	timer_setup(&deferred_timer, timer_fn, 0);
	mod_timer(&deferred_timer, jiffies + msecs_to_jiffies(100));
	INIT_WORK(&deferred_work, work_fn);
	INIT_DELAYED_WORK(&deferred_dwork, dwork_fn);
	tasklet_setup(&deferred_tasklet, tasklet_fn);
	if (!schedule_work(&deferred_work))
		return -EBUSY;
	schedule_delayed_work(&deferred_dwork, msecs_to_jiffies(50));
	tasklet_schedule(&deferred_tasklet);
	deferred_thread = kthread_run(thread_fn, "worker", "deferred/%d", 0);
	if (IS_ERR(deferred_thread))
		return PTR_ERR(deferred_thread);
	if (!wait_for_completion_timeout(&work_done, HZ))
		return -ETIMEDOUT;
	msleep(20);
	pr_info("deferred: init done after %lu jiffies, ran %#x\n", jiffies - start, ran);
	return 0;
}

static void __exit deferred_exit(void)
{
	del_timer_sync(&deferred_timer);
	cancel_delayed_work_sync(&deferred_dwork);
	cancel_work_sync(&deferred_work);
	tasklet_kill(&deferred_tasklet);
	pr_info("deferred: exit, ran %#x\n", ran);
}

module_init(deferred_init);
module_exit(deferred_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: timers, work, tasklets, kthreads, completions");
