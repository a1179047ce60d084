// SPDX-License-Identifier: GPL-2.0
/*
 * tailcall: init ends with a tail call to a kernel function, so gcc -O2 emits
 * "b __platform_driver_register" (R_ARM_JUMP24 / R_ARM_THM_JUMP24) instead of bl.
 */
#include <linux/init.h>
#include <linux/module.h>
#include <linux/platform_device.h>

static int tailcall_probe(struct platform_device *pdev)
{
	return 0;
}

static struct platform_driver tailcall_driver = {
	.probe = tailcall_probe,
	.driver = {
		.name = "armload-tailcall",
	},
};

static int __init tailcall_init(void)
{
	return platform_driver_register(&tailcall_driver);
}

static void __exit tailcall_exit(void)
{
	platform_driver_unregister(&tailcall_driver);
}

module_init(tailcall_init);
module_exit(tailcall_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: init tail-calls a kernel function");
