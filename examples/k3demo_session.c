// SPDX-License-Identifier: GPL-2.0
/*
 * k3demo sessions: a reference-counted object per open file.
 */
#include <linux/kref.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "k3demo.h"

struct k3demo_session {
	struct kref ref;
	struct work_struct work;
	void *scratch;
	int id;
};

static void k3demo_session_release(struct kref *ref)
{
	struct k3demo_session *s = container_of(ref, struct k3demo_session, ref);

	kfree(s->scratch);
	kfree(s);
}

static void k3demo_session_put(struct k3demo_session *s)
{
	kref_put(&s->ref, k3demo_session_release);
}

static int k3demo_session_register(struct k3demo_session *s);

static struct k3demo_session *k3demo_session_create(int id)
{
	struct k3demo_session *s;
	int err;

	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return ERR_PTR(-ENOMEM);
	kref_init(&s->ref);
	s->id = id;

	s->scratch = kmalloc(PAGE_SIZE, GFP_KERNEL);
	if (!s->scratch) {
		err = -ENOMEM;
		goto err_free;
	}

	err = k3demo_session_register(s);
	if (err)
		goto err_put;
	return s;

err_put:
	k3demo_session_put(s);
err_free:
	pr_debug("k3demo: session %d failed: %d\n", s->id, err);
	kfree(s);
	return ERR_PTR(err);
}

static int k3demo_session_register(struct k3demo_session *s)
{
	return s->id < 0 ? -EINVAL : 0;
}

DEFINE_SIMPLE_ATTRIBUTE(k3demo_session_fops, NULL, NULL, "%llu\n");
