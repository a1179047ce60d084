// SPDX-License-Identifier: GPL-2.0
/*
 * devkit: what a module developer writes first, to exercise armload's developer tools:
 * parameters of every common type, a list under a spinlock, exported functions to call
 * with integers, strings and buffers, and a NULL dereference behind the `crash` parameter
 * (two calls deep, with the list lock held) for the oops/backtrace.
 */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/printk.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/list.h>
#include <linux/string.h>
#include <linux/workqueue.h>
#include <linux/jiffies.h>

static int crash;
module_param(crash, int, 0444);
MODULE_PARM_DESC(crash, "1: dereference NULL in init, with the list lock held");
static unsigned int count = 3;
module_param(count, uint, 0444);
MODULE_PARM_DESC(count, "items init adds to the list");
static bool verbose;
module_param(verbose, bool, 0644);
static char *label = "devkit";
module_param(label, charp, 0444);
static char tag[8] = "t0";
module_param_string(tag, tag, sizeof(tag), 0444);
static int weights[4] = { 1, 1, 1, 1 };
static int nweights = 4;
module_param_array(weights, int, &nweights, 0444);

struct devkit_item {
	struct list_head node;
	int value;
};

static LIST_HEAD(devkit_list);
static DEFINE_SPINLOCK(devkit_lock);
static int * volatile devkit_null;	/* opaque to the optimiser */

int devkit_add(int value)
{
	struct devkit_item *it = kmalloc(sizeof(*it), GFP_KERNEL);

	if (!it)
		return -ENOMEM;
	it->value = value;
	spin_lock(&devkit_lock);
	list_add_tail(&it->node, &devkit_list);
	spin_unlock(&devkit_lock);
	return 0;
}
EXPORT_SYMBOL(devkit_add);

int devkit_sum(int scale)
{
	struct devkit_item *it;
	int sum = 0;

	spin_lock(&devkit_lock);
	list_for_each_entry(it, &devkit_list, node)
		sum += it->value * scale;
	spin_unlock(&devkit_lock);
	return sum;
}
EXPORT_SYMBOL(devkit_sum);

/* Fills buf with "label/tag:items"; returns the length, as scnprintf does. */
int devkit_describe(char *buf, int len)
{
	struct devkit_item *it;
	int n = 0;

	list_for_each_entry(it, &devkit_list, node)
		n++;
	return scnprintf(buf, len, "%s/%s:%d", label, tag, n);
}
EXPORT_SYMBOL(devkit_describe);

/* Counts the occurrences of c in s. */
int devkit_count_char(const char *s, int c)
{
	int n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}
EXPORT_SYMBOL(devkit_count_char);

/* Deferred work: adds `devkit_later_value` to the list when it runs. */
static int devkit_later_value;

static void devkit_later_fn(struct work_struct *work)
{
	devkit_add(devkit_later_value);
	pr_info("devkit: deferred add %d\n", devkit_later_value);
}
static DECLARE_DELAYED_WORK(devkit_later, devkit_later_fn);

int devkit_add_later(int value, int delay_ms)
{
	devkit_later_value = value;
	return schedule_delayed_work(&devkit_later, msecs_to_jiffies(delay_ms));
}
EXPORT_SYMBOL(devkit_add_later);

static noinline int devkit_peek(int *p)
{
	return *p + 1;
}

static noinline int devkit_crash(void)
{
	int v;

	spin_lock(&devkit_lock);
	v = devkit_peek(devkit_null);
	spin_unlock(&devkit_lock);
	return v;
}

static void devkit_free_all(void)
{
	struct devkit_item *it, *tmp;

	list_for_each_entry_safe(it, tmp, &devkit_list, node) {
		list_del(&it->node);
		kfree(it);
	}
}

static int __init devkit_init(void)
{
	unsigned int i;
	int err;

	for (i = 0; i < count; i++) {
		err = devkit_add(i * weights[i % nweights]);
		if (err) {
			devkit_free_all();
			return err;
		}
	}
	if (verbose)
		pr_info("devkit: %s/%s: %u items, %d weights\n", label, tag, count, nweights);
	if (crash)
		return devkit_crash();
	pr_info("devkit: loaded (sum %d)\n", devkit_sum(1));
	return 0;
}

static void __exit devkit_exit(void)
{
	cancel_delayed_work_sync(&devkit_later);
	devkit_free_all();
	pr_info("devkit: unloaded\n");
}

module_init(devkit_init);
module_exit(devkit_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: parameters, a locked list, exported calls, a crash switch");
