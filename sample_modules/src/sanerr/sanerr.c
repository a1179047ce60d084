// SPDX-License-Identifier: GPL-2.0
/* sanerr: init's error paths, for the fault sweep (`armload run --fail-sweep`): five
 * allocations, each failure handled differently; and two calls for kmemleak's scan on demand
 * (sanerr_lose drops its object, sanerr_keep keeps one in module data). */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>

static struct {
	char *a, *b, *c, *e;
	int *d;
} st;
static char *kept;

noinline int sanerr_lose(int n)
{
	char *p = kmalloc(n, GFP_KERNEL);

	if (!p)
		return -ENOMEM;
	memset(p, 0x5a, n);
	return 0;				/* the only pointer is lost */
}
EXPORT_SYMBOL_GPL(sanerr_lose);

noinline int sanerr_keep(int n)
{
	kfree(kept);
	kept = kmalloc(n, GFP_KERNEL);
	return kept ? 0 : -ENOMEM;
}
EXPORT_SYMBOL_GPL(sanerr_keep);

static int __init sanerr_init(void)
{
	st.a = kmalloc(32, GFP_KERNEL);
	if (!st.a)
		return -ENOMEM;			/* 1: handled */
	st.b = kmalloc(64, GFP_KERNEL);
	if (!st.b)
		goto free_a;			/* 2: handled */
	st.c = kzalloc(128, GFP_KERNEL);
	if (!st.c)
		return -ENOMEM;			/* 3: leaks a and b */
	st.d = kmalloc(4 * sizeof(int), GFP_KERNEL);
	st.d[0] = 1;				/* 4: not checked: a NULL dereference */
	st.e = kmalloc(256, GFP_KERNEL);
	if (!st.e)
		return 0;			/* 5: the failure ignored: init says success */
	return 0;
free_a:
	kfree(st.a);
	return -ENOMEM;
}

static void __exit sanerr_exit(void)
{
	kfree(st.a);
	kfree(st.b);
	kfree(st.c);
	kfree(st.d);
	kfree(st.e);
	kfree(kept);
}

module_init(sanerr_init);
module_exit(sanerr_exit);
MODULE_LICENSE("GPL");
