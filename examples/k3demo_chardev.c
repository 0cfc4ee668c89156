// SPDX-License-Identifier: GPL-2.0
/*
 * k3demo character device: a tiny message store behind an ioctl interface.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "k3demo.h"

struct k3demo_slot {
	u32 len;
	u8 buf[K3DEMO_MSG_MAX];
};

static struct k3demo_slot k3demo_slots[K3DEMO_NR_SLOTS];
static DEFINE_MUTEX(k3demo_lock);

static long k3demo_write_msg(void __user *argp)
{
	struct k3demo_msg hdr;
	struct k3demo_slot *slot;

	if (copy_from_user(&hdr, argp, offsetof(struct k3demo_msg, data)))
		return -EFAULT;

	slot = &k3demo_slots[hdr.slot];

	mutex_lock(&k3demo_lock);
	if (copy_from_user(slot->buf, argp + offsetof(struct k3demo_msg, data), hdr.len)) {
		mutex_unlock(&k3demo_lock);
		return -EFAULT;
	}
	slot->len = hdr.len;
	mutex_unlock(&k3demo_lock);
	return 0;
}

static long k3demo_read_msg(void __user *argp)
{
	struct k3demo_msg msg = {};

	if (copy_from_user(&msg, argp, sizeof(msg)))
		return -EFAULT;
	if (msg.slot >= K3DEMO_NR_SLOTS)
		return -EINVAL;

	mutex_lock(&k3demo_lock);
	msg.len = min_t(u32, k3demo_slots[msg.slot].len, K3DEMO_MSG_MAX);
	memcpy(msg.data, k3demo_slots[msg.slot].buf, msg.len);
	mutex_unlock(&k3demo_lock);

	return copy_to_user(argp, &msg, sizeof(msg)) ? -EFAULT : 0;
}

static long k3demo_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case K3DEMO_IOC_WRITE:
		return k3demo_write_msg(argp);
	case K3DEMO_IOC_READ:
		return k3demo_read_msg(argp);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations k3demo_fops = {
	.owner		= THIS_MODULE,
	.unlocked_ioctl	= k3demo_ioctl,
	.llseek		= noop_llseek,
};

static struct miscdevice k3demo_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= K3DEMO_NAME,
	.fops	= &k3demo_fops,
};

static int __init k3demo_init(void)
{
	return misc_register(&k3demo_misc);
}

static void __exit k3demo_exit(void)
{
	misc_deregister(&k3demo_misc);
}

module_init(k3demo_init);
module_exit(k3demo_exit);
MODULE_LICENSE("GPL");
