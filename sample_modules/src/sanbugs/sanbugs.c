// SPDX-License-Identifier: GPL-2.0
/* sanbugs: the seven bug classes of issue 32, one per value of `bug` (0: none, the clean path,
 * which keeps its objects and frees them in exit). The sanitizers must report each; the kernel
 * alone (no KASAN, kmemleak or lockdep in Debian's armmp) notices only the double free. */
#include <linux/delay.h>
#include <linux/init.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rtnetlink.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>

static int bug;
module_param(bug, int, 0444);
MODULE_PARM_DESC(bug, "1 heap overrun, 2 use after free, 3 leak, 4 double free, 5 msleep under a spinlock, "
		 "6 init returns with a mutex held, 7 stack buffer overrun, 8 lock-order inversion");

static DEFINE_SPINLOCK(san_lock);
static DEFINE_RWLOCK(san_rwlock);
static DEFINE_MUTEX(san_mutex);
static DEFINE_MUTEX(san_mutex2);
static char *kept;		/* the clean path's object, referenced until exit */
static volatile int sink;

static noinline void fill(char *p, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = 'a' + i % 26;
}

static noinline int stack_overrun(int n)
{
	char buf[16];

	fill(buf, n);
	return buf[3];
}

static int __init sanbugs_init(void)
{
	char *p;

	switch (bug) {
	case 0:
		kept = kmalloc(40, GFP_KERNEL);
		if (!kept)
			return -ENOMEM;
		fill(kept, 40);
		spin_lock(&san_lock);
		sink = kept[39];
		spin_unlock(&san_lock);
		read_lock(&san_rwlock);
		sink = kept[0];
		read_unlock(&san_rwlock);	/* inlined: arch_read_unlock's strex */
		write_lock(&san_rwlock);
		sink = kept[1];
		write_unlock(&san_rwlock);	/* inlined: arch_write_unlock's str of 0 */
		rtnl_lock();			/* b mutex_lock: taken with the module's LR */
		rtnl_unlock();			/* released by kernel code (__rtnl_unlock) */
		mutex_lock(&san_mutex);
		mutex_lock(&san_mutex2);
		mutex_unlock(&san_mutex2);
		mutex_unlock(&san_mutex);
		msleep(1);
		sink = stack_overrun(16);
		return 0;
	case 1:
		p = kmalloc(40, GFP_KERNEL);
		if (!p)
			return -ENOMEM;
		fill(p, 41);			/* one byte past the 40 asked for */
		kfree(p);
		return 0;
	case 2:
		p = kmalloc(40, GFP_KERNEL);
		if (!p)
			return -ENOMEM;
		kfree(p);
		sink = p[8];			/* read after kfree */
		return 0;
	case 3:
		p = kmalloc(40, GFP_KERNEL);
		if (!p)
			return -ENOMEM;
		fill(p, 40);
		p = NULL;			/* the only pointer is lost */
		return 0;
	case 4:
		p = kmalloc(40, GFP_KERNEL);
		if (!p)
			return -ENOMEM;
		kfree(p);
		kfree(p);			/* freed twice */
		return 0;
	case 5:
		spin_lock(&san_lock);
		msleep(1);			/* sleeps with a spinlock held */
		spin_unlock(&san_lock);
		return 0;
	case 6:
		mutex_lock(&san_mutex);		/* never unlocked */
		return 0;
	case 7:
		sink = stack_overrun(20);	/* 20 bytes into a 16-byte array */
		return 0;
	case 8:
		mutex_lock(&san_mutex);
		mutex_lock(&san_mutex2);
		mutex_unlock(&san_mutex2);
		mutex_unlock(&san_mutex);
		mutex_lock(&san_mutex2);
		mutex_lock(&san_mutex);		/* the other order */
		mutex_unlock(&san_mutex);
		mutex_unlock(&san_mutex2);
		return 0;
	}
	return -EINVAL;
}

static void __exit sanbugs_exit(void)
{
	kfree(kept);
}

module_init(sanbugs_init);
module_exit(sanbugs_exit);
MODULE_LICENSE("GPL");
