/* SPDX-License-Identifier: GPL-2.0 */
/*
 * k3demo - shared definitions for the k3lsp demo driver.
 *
 * Shared by the k3demo driver sources in this directory.
 */
#ifndef _K3DEMO_H
#define _K3DEMO_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define K3DEMO_NAME		"k3demo"
#define K3DEMO_MSG_MAX		64
#define K3DEMO_NR_SLOTS		16

struct k3demo_msg {
	__u32 slot;
	__u32 len;
	__u8 data[K3DEMO_MSG_MAX];
};

struct k3demo_rule {
	__u32 id;
	__u32 flags;
	__u64 cookie;
};

#define K3DEMO_IOC_MAGIC	'k'
#define K3DEMO_IOC_WRITE	_IOW(K3DEMO_IOC_MAGIC, 1, struct k3demo_msg)
#define K3DEMO_IOC_READ		_IOR(K3DEMO_IOC_MAGIC, 2, struct k3demo_msg)

#endif /* _K3DEMO_H */
