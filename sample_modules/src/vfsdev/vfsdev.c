// SPDX-License-Identifier: GPL-2.0
/*
 * vfsdev: a misc device for device I/O through the kernel's VFS (armload's booted runtime and
 * the QEMU oracle drive it the same way): read/write/llseek on a one-page buffer, ioctls that
 * copy to and from user memory (EFAULT on a bad pointer, EINVAL on a bad value, ENOTTY on an
 * unknown command; a NULL dereference behind VFSDEV_IOC_CRASH), poll, mmap of the buffer page,
 * a runtime parameter, a device attribute (/sys/class/misc/vfsdev/opens), a debugfs file and a
 * /proc file.
 */
#include <linux/debugfs.h>
#include <linux/device.h>
#include <linux/fs.h>
#include <linux/init.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>

static int fill = 'v';
module_param(fill, int, 0644);
MODULE_PARM_DESC(fill, "the byte VFSDEV_IOC_FILL writes (0..255)");

#define VFSDEV_IOC_LEN   _IOR('v', 1, int)	/* the buffer's length */
#define VFSDEV_IOC_SET   _IOW('v', 2, int)	/* the length (0..PAGE_SIZE) */
#define VFSDEV_IOC_FILL  _IO('v', 3)		/* the whole length set to `fill` */
#define VFSDEV_IOC_CRASH _IO('v', 4)		/* a NULL dereference (the kernel's oops) */

static char *data;			/* one page: read, written and mapped */
static size_t len;
static unsigned int opens, writes;
static struct dentry *dbg;
static int * volatile vfsdev_null;	/* opaque to the optimiser */

static int vfsdev_open(struct inode *inode, struct file *f)
{
	opens++;
	return 0;
}

static ssize_t vfsdev_read(struct file *f, char __user *buf, size_t n, loff_t *pos)
{
	return simple_read_from_buffer(buf, n, pos, data, len);
}

static ssize_t vfsdev_write(struct file *f, const char __user *buf, size_t n, loff_t *pos)
{
	ssize_t r;

	if (*pos >= PAGE_SIZE)
		return -ENOSPC;
	r = simple_write_to_buffer(data, PAGE_SIZE, pos, buf, n);
	if (r > 0) {
		writes++;
		if (*pos > len)
			len = *pos;
	}
	return r;
}

static long vfsdev_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	int v;

	switch (cmd) {
	case VFSDEV_IOC_LEN:
		return put_user((int)len, (int __user *)arg);
	case VFSDEV_IOC_SET:
		if (get_user(v, (int __user *)arg))
			return -EFAULT;
		if (v < 0 || v > PAGE_SIZE)
			return -EINVAL;
		len = v;
		return 0;
	case VFSDEV_IOC_FILL:
		if (fill < 0 || fill > 255)
			return -EINVAL;
		memset(data, fill, len);
		return len;
	case VFSDEV_IOC_CRASH:
		return *vfsdev_null;
	}
	return -ENOTTY;
}

static __poll_t vfsdev_poll(struct file *f, poll_table *wait)
{
	return (len ? EPOLLIN | EPOLLRDNORM : 0) | EPOLLOUT | EPOLLWRNORM;
}

static int vfsdev_mmap(struct file *f, struct vm_area_struct *vma)
{
	if (vma->vm_pgoff || vma->vm_end - vma->vm_start > PAGE_SIZE)
		return -EINVAL;
	return remap_pfn_range(vma, vma->vm_start, virt_to_phys(data) >> PAGE_SHIFT,
			       vma->vm_end - vma->vm_start, vma->vm_page_prot);
}

static int vfsdev_release(struct inode *inode, struct file *f)
{
	return 0;
}

static const struct file_operations vfsdev_fops = {
	.owner = THIS_MODULE,
	.open = vfsdev_open,
	.read = vfsdev_read,
	.write = vfsdev_write,
	.llseek = default_llseek,
	.unlocked_ioctl = vfsdev_ioctl,
	.poll = vfsdev_poll,
	.mmap = vfsdev_mmap,
	.release = vfsdev_release,
};

static ssize_t opens_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", opens);
}
static DEVICE_ATTR_RO(opens);

static struct attribute *vfsdev_attrs[] = {
	&dev_attr_opens.attr,
	NULL,
};
ATTRIBUTE_GROUPS(vfsdev);

static struct miscdevice vfsdev_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "vfsdev",
	.fops = &vfsdev_fops,
	.groups = vfsdev_groups,
};

static int vfsdev_proc_show(struct seq_file *m, void *v)
{
	seq_printf(m, "len %zu opens %u writes %u\n", len, opens, writes);
	return 0;
}

static int __init vfsdev_init(void)
{
	int ret;

	data = (char *)get_zeroed_page(GFP_KERNEL);
	if (!data)
		return -ENOMEM;
	ret = misc_register(&vfsdev_misc);
	if (ret) {
		free_page((unsigned long)data);
		return ret;
	}
	dbg = debugfs_create_dir("vfsdev", NULL);
	debugfs_create_u32("writes", 0644, dbg, &writes);
	proc_create_single("vfsdev", 0444, NULL, vfsdev_proc_show);
	pr_info("vfsdev: misc minor %d\n", vfsdev_misc.minor);
	return 0;
}

static void __exit vfsdev_exit(void)
{
	remove_proc_entry("vfsdev", NULL);
	debugfs_remove_recursive(dbg);
	misc_deregister(&vfsdev_misc);
	free_page((unsigned long)data);
}

module_init(vfsdev_init);
module_exit(vfsdev_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("armload sample: a misc device driven through the kernel's VFS");
