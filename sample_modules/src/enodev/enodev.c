// SPDX-License-Identifier: GPL-2.0
/* enodev (deliberately failing): init prints and returns -ENODEV, so the load fails. */
#include <linux/errno.h>
#include <linux/init.h>
#include <linux/module.h>
#include <linux/printk.h>

static int __init enodev_init(void)
{
	pr_info("enodev: no device found, giving up\n");
	return -ENODEV;
}

static void __exit enodev_exit(void)
{
}

module_init(enodev_init);
module_exit(enodev_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample (broken): init returns -ENODEV");
