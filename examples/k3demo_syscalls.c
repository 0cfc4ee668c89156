// SPDX-License-Identifier: GPL-2.0
/*
 * k3demo rule table: installed through a system call, one rule array per
 * caller.
 */
#include <linux/capability.h>
#include <linux/list.h>
#include <linux/slab.h>
#include <linux/syscalls.h>
#include <linux/uaccess.h>

#include "k3demo.h"

#define K3DEMO_MAX_RULES	4096

struct k3demo_table {
	struct list_head node;
	u32 nr_rules;
	struct k3demo_rule rules[];
};

static LIST_HEAD(k3demo_tables);
static DEFINE_SPINLOCK(k3demo_tables_lock);

static struct k3demo_table *k3demo_alloc_table(u32 nr_rules)
{
	struct k3demo_table *table;
	u32 size;

	size = sizeof(*table) + nr_rules * sizeof(struct k3demo_rule);
	table = kmalloc(size, GFP_KERNEL);
	if (!table)
		return NULL;
	table->nr_rules = nr_rules;
	INIT_LIST_HEAD(&table->node);
	return table;
}

/*
 * Install a rule table supplied by user space.
 */
SYSCALL_DEFINE3(k3demo_set_rules, const struct k3demo_rule __user *, urules,
		u32, nr_rules, unsigned int, flags)
{
	struct k3demo_table *table;

	if (flags)
		return -EINVAL;

	table = k3demo_alloc_table(nr_rules);
	if (!table)
		return -ENOMEM;

	if (copy_from_user(table->rules, urules, nr_rules * sizeof(*urules))) {
		kfree(table);
		return -EFAULT;
	}

	spin_lock(&k3demo_tables_lock);
	list_add_tail(&table->node, &k3demo_tables);
	spin_unlock(&k3demo_tables_lock);
	return 0;
}

SYSCALL_DEFINE0(k3demo_flush_tables)
{
	struct k3demo_table *table, *tmp;

	if (!capable(CAP_NET_ADMIN))
		return -EPERM;

	spin_lock(&k3demo_tables_lock);
	list_for_each_entry_safe(table, tmp, &k3demo_tables, node) {
		list_del(&table->node);
		kfree(table);
	}
	spin_unlock(&k3demo_tables_lock);
	return 0;
}
