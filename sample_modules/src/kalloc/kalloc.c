// SPDX-License-Identifier: GPL-2.0
/* kalloc: allocate a struct with kmalloc and kzalloc, fill and print it, free it. */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>
#include <linux/slab.h>
#include <linux/string.h>

struct kalloc_rec {
	int id;
	unsigned int flags;
	char name[16];
	unsigned long values[4];
};

static int __init kalloc_init(void)
{
	struct kalloc_rec *a, *b;
	int i;

	a = kmalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b) {
		kfree(a);
		return -ENOMEM;
	}
	a->id = 7;
	a->flags = 0x5a;
	strscpy(a->name, "kalloc-rec", sizeof(a->name));
	for (i = 0; i < ARRAY_SIZE(a->values); i++)
		a->values[i] = i * 1000 + a->id;
	b->id = a->id + 1;

	pr_info("kalloc: id=%d flags=%#x name=%s v3=%lu zeroed=%u\n",
		a->id, a->flags, a->name, a->values[3], b->flags);
	kfree(b);
	kfree(a);
	return 0;
}

static void __exit kalloc_exit(void)
{
	pr_info("kalloc: unloaded\n");
}

module_init(kalloc_init);
module_exit(kalloc_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: kmalloc/kzalloc/kfree");
