// SPDX-License-Identifier: GPL-2.0
/* regdev: registers a misc device and a platform driver; unregisters both on exit. */
#include <linux/fs.h>
#include <linux/init.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/platform_device.h>
#include <linux/printk.h>

static ssize_t regdev_read(struct file *f, char __user *buf, size_t len, loff_t *pos)
{
	return 0;
}

static const struct file_operations regdev_fops = {
	.owner = THIS_MODULE,
	.read = regdev_read,
	.llseek = noop_llseek,
};

static struct miscdevice regdev_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "armload_regdev",
	.fops = &regdev_fops,
};

static int regdev_probe(struct platform_device *pdev)
{
	dev_info(&pdev->dev, "regdev: probed\n");
	return 0;
}

static int regdev_remove(struct platform_device *pdev)
{
	return 0;
}

static struct platform_driver regdev_driver = {
	.probe = regdev_probe,
	.remove = regdev_remove,
	.driver = {
		.name = "armload-regdev",
	},
};

static int __init regdev_init(void)
{
	int ret;

	ret = misc_register(&regdev_misc);
	if (ret)
		return ret;
	ret = platform_driver_register(&regdev_driver);
	if (ret) {
		misc_deregister(&regdev_misc);
		return ret;
	}
	pr_info("regdev: registered misc minor %d\n", regdev_misc.minor);
	return 0;
}

static void __exit regdev_exit(void)
{
	platform_driver_unregister(&regdev_driver);
	misc_deregister(&regdev_misc);
	pr_info("regdev: unloaded\n");
}

module_init(regdev_init);
module_exit(regdev_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: misc device + platform driver");
