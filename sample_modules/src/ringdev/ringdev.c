// SPDX-License-Identifier: GPL-2.0
/* ringdev: a misc device over a kmalloc'd ring buffer, a list of writers, self-re-arming
 * delayed work, exported helpers, and NULL / out-of-bounds bugs behind the `bug` parameter. */
#include <linux/fs.h>
#include <linux/init.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include <linux/ioctl.h>

static int ring_size = 64;
module_param(ring_size, int, 0444);
MODULE_PARM_DESC(ring_size, "ring buffer size in bytes");
static int bug;
module_param(bug, int, 0644);
MODULE_PARM_DESC(bug, "0 none, 1 NULL dereference in init, 2 out-of-bounds write in ringdev_fill");
static int tick_ms = 10;
module_param(tick_ms, int, 0444);

#define RINGDEV_IOC_COUNT _IOR('r', 1, int)
#define RINGDEV_IOC_RESET _IO('r', 2)

struct writer {
	struct list_head node;
	int len;
};

static char *ring;
static int head, tail, count;
static int ticks;
static LIST_HEAD(writers);
static struct delayed_work tick;

static void tick_fn(struct work_struct *w)
{
	ticks++;
	if (ticks < 3)
		schedule_delayed_work(&tick, msecs_to_jiffies(tick_ms));
}

static int ringdev_peek(int off)
{
	if (off >= count)
		return -1;
	return ring[(tail + off) % ring_size];
}

int ringdev_count(void)
{
	return count;
}
EXPORT_SYMBOL_GPL(ringdev_count);

int ringdev_push(const char *src, int len)
{
	struct writer *w;
	int i;

	for (i = 0; i < len && count < ring_size; i++, count++) {
		ring[head] = src[i];
		head = (head + 1) % ring_size;
	}
	w = kmalloc(sizeof(*w), GFP_KERNEL);
	if (!w)
		return -ENOMEM;
	w->len = i;
	list_add_tail(&w->node, &writers);
	return i;
}
EXPORT_SYMBOL_GPL(ringdev_push);

int ringdev_fill(int n)
{
	int i;

	for (i = 0; i < n + (bug == 2 ? 8 : 0); i++)
		ring[i] = 'x';
	return ringdev_peek(0);
}
EXPORT_SYMBOL_GPL(ringdev_fill);

static ssize_t ringdev_read(struct file *f, char __user *buf, size_t len, loff_t *pos)
{
	char tmp[64];
	int n = 0;

	while (n < len && n < sizeof(tmp) && count) {
		tmp[n++] = ring[tail];
		tail = (tail + 1) % ring_size;
		count--;
	}
	if (copy_to_user(buf, tmp, n))
		return -EFAULT;
	return n;
}

static ssize_t ringdev_write(struct file *f, const char __user *buf, size_t len, loff_t *pos)
{
	char tmp[64];

	if (len > sizeof(tmp))
		len = sizeof(tmp);
	if (copy_from_user(tmp, buf, len))
		return -EFAULT;
	return ringdev_push(tmp, len);
}

static long ringdev_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	switch (cmd) {
	case RINGDEV_IOC_COUNT:
		return put_user(count, (int __user *)arg);
	case RINGDEV_IOC_RESET:
		head = tail = count = 0;
		return 0;
	}
	return -ENOTTY;
}

static const struct file_operations ringdev_fops = {
	.owner = THIS_MODULE,
	.read = ringdev_read,
	.write = ringdev_write,
	.unlocked_ioctl = ringdev_ioctl,
	.llseek = noop_llseek,
};

static struct miscdevice ringdev_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "ringdev",
	.fops = &ringdev_fops,
};

static int __init ringdev_init(void)
{
	int ret;

	ring = kmalloc(ring_size, GFP_KERNEL);
	if (bug == 1)
		ring = NULL;
	ring[0] = 0;
	ret = misc_register(&ringdev_misc);
	if (ret) {
		kfree(ring);
		return ret;
	}
	INIT_DELAYED_WORK(&tick, tick_fn);
	schedule_delayed_work(&tick, msecs_to_jiffies(tick_ms));
	pr_info("ringdev: %d bytes, peek %d\n", ring_size, ringdev_peek(0));
	return 0;
}

static void __exit ringdev_exit(void)
{
	struct writer *w, *n;

	cancel_delayed_work_sync(&tick);
	misc_deregister(&ringdev_misc);
	list_for_each_entry_safe(w, n, &writers, node) {
		list_del(&w->node);
		kfree(w);
	}
	kfree(ring);
}

module_init(ringdev_init);
module_exit(ringdev_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("ringdev: a misc-device ring buffer (armload walkthrough)");
