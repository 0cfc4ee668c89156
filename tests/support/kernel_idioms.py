"""Minimal C (and C++) for every kernel construct that once broke the splitter, each with its functions known
in advance: the cases of tests/lsp/test_units_kernel.py, and the kernel part of bench/kernel_scale.py's quick
tree. ``truth`` lists each function's unit name and its first and last line (1-based, inclusive).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str  # also the file name in the bench's quick tree
    source: str
    truth: list[tuple[str, int, int]]
    suffix: str = ".c"


LOOP_WITH_CAST = """\
static long k3_sum(unsigned long arg)
{
	long total = 0;
	int cpu;
	void __user *p = (void __user *)arg;

	for_each_possible_cpu(cpu) {
		total += per_cpu(k3_counter, cpu);
	}
	if (copy_to_user(p, &total, sizeof(total)))
		return -EFAULT;
	return 0;
}

static int k3_after(void)
{
	return 1;
}
"""

SYSCALL_IFDEF = """\
SYSCALL_DEFINE2(fanotify_init, unsigned int, flags, unsigned int, event_f_flags)
{
	struct fsnotify_group *group;
	int f_flags, fd;

	pr_debug("%s: flags=%x event_f_flags=%x\\n", __func__, flags, event_f_flags);

#ifdef CONFIG_AUDITSYSCALL
	if (flags & ~(FANOTIFY_INIT_FLAGS | FAN_ENABLE_AUDIT))
#else
	if (flags & ~FANOTIFY_INIT_FLAGS)
#endif
		return -EINVAL;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	return fd;
}
"""

IF_IN_PARAMETERS = """\
static int k3_open(struct inode *inode,
#ifdef CONFIG_K3_FILE
			struct file *file,
#else
			void *unused,
#endif
			int flags)
{
	return flags;
}

int k3_next(void)
{
	return 0;
}
"""

PRINTF_ATTRIBUTE = """\
static __printf(3, 4) void k3_log(struct device *dev, int level, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	vprintk(fmt, args);
	va_end(args);
}

static inline __must_check __printf(2, 3)
int k3_fmt(char *buf, const char *fmt, ...)
{
	return 0;
}
"""

SIZED_BY = """\
static void *__sized_by_or_null(size)
m_bigalloc(size_t size, int how)
{
	return kalloc_data(size, how);
}

static const char *__sized_by(len) __attribute__((noinline))
k3_description(struct k3_result *r, size_t len)
{
	return r->desc;
}

uint8_t *__counted_by(n) k3_buf(int n) __attribute__((__warn_unused_result__))
{
	return NULL;
}
"""

WHILE_EACH_THREAD = """\
static void k3_walk(struct task_struct *g)
{
	struct task_struct *p = g, *t = g;

	do_each_thread(g, t) {
		k3_visit(t);
	} while_each_thread(g, t);
	do {
		k3_visit(t);
	} while_each_thread(p, t);
	k3_done(g);
}

static int k3_later(void)
{
	return 2;
}
"""

STATEMENT_MACROS = """\
static int k3_guarded(struct k3 *k)
{
	__unreachable_ok_push
	if (k == NULL)
		return -1;
	__unreachable_ok_pop
	rcu_read_lock_guard()
	__typed_allocators_ignore_push
	k->n++;
	__typed_allocators_ignore_pop
	return 0;
}

__BEGIN_DECLS
int k3_exported(void)
{
	return 0;
}
__END_DECLS
"""

LOOP_MACROS = """\
static void k3_lists(struct list_head *head, struct hlist_head *h, struct k3q *q)
{
	struct k3_item *pos, *tmp;
	struct hlist_node *n;

	list_for_each_entry_safe(pos, tmp, head, node) {
		if (pos->dead)
			list_del(&pos->node);
	}
	hlist_for_each_entry_rcu(pos, h, hnode)
		pos->seen++;
	TAILQ_FOREACH(pos, &q->items, link) {
		pos->seen++;
	}
	queue_iterate(&q->queue, pos, struct k3_item *, qlink) {
		pos->seen++;
	}
	scoped_guard (spinlock, &q->lock) {
		q->n = 0;
	}
	idr_for_each(&q->idr, k3_one, NULL);  /* a function named like a loop: a call, not a loop */
}

int k3_for_each_done(struct k3q *q)
{
	return q->n;
}
"""

UNBALANCED_HEADERS = """\
#ifdef CONFIG_K3_NEW
int k3_probe(struct device *dev) {
#else
int k3_probe(struct device *dev, int legacy) {
#endif
	return 0;
}

int
#ifdef __APPLE__
key_output(struct mbuf *m, struct socket *so)
#else
key_output(m, va_alist)
struct mbuf *m;
va_dcl
#endif
{
	return 0;
}

#ifdef __cplusplus
extern "C" {
#endif
int k3_c_api(void)
{
	return 3;
}
#ifdef __cplusplus
}
#endif
"""

DEFINE_IN_BODY = """\
static void k3_flush(struct k3 *k)
{
#define K3_FLUSH_ONE(x)                                          \\
	do {                                                            \\
		if ((x)->dirty) {                                       \\
			/* \\
				* a comment over several lines inside the macro
				* has no backslashes of its own
				*/ \\
			k3_write(x);                                    \\
		}                                                       \\
	} while (0)

	K3_FLUSH_ONE(k);
}

os_ref_count_t
(os_ref_release_named)(os_ref_t ref, struct os_refgrp *grp)
{
	return 0;
}

static void (*k3_handler(int sig))(int)
{
	return NULL;
}
"""

TRAILING_ATTRIBUTES = """\
__xnu_string_inline __stateful_pure
int
bcmp(
	const void *const s1 __xnu_pass_struct_size __sized_by(n),
	const void *const s2 __xnu_pass_struct_size __sized_by(n),
	size_t n)
__xnu_struct_size_precondition(s1, n, "read overflow (first argument)")
__xnu_struct_size_precondition(s2, n, "read overflow (second argument)")
{
	return __xnu_bcmp(s1, s2, n);
}

int k3_checked(int x) K3_WARN_UNUSED(result)
{
	return x;
}
"""

K_AND_R = """\
void
kdebug_sadb(base)
struct sadb_msg *base;
{
	return;
}

static TAILQ_HEAD(k3_head, k3_work) k3_done = TAILQ_HEAD_INITIALIZER(k3_done);

struct k3_identity {
	int ki_valid;
};

void
ipsec_bindump(buf, len)
caddr_t buf;
int len;
{
	int i;

	for (i = 0; i < len; i++)
		printf("%c", (unsigned char)buf[i]);
}
"""


IOKIT_HEADER = """\
#ifndef _IOKIT_K3DEVICE_H
#define _IOKIT_K3DEVICE_H

#include <IOKit/IOService.h>

class K3Device : public IOService
{
	OSDeclareDefaultStructors(K3Device);

public:
	virtual bool start(IOService *provider) APPLE_KEXT_OVERRIDE;

	inline uint32_t
	count() const
	{
		return fCount;
	}

	template <typename T>
	T *
	as() const
	{
		return OSDynamicCast(T, this);
	}

private:
	uint32_t fCount;
};

inline bool
K3Device::ready(void) const
{
	return fCount > 0;
}

#endif
"""


CPP_CONSTRUCTS = """\
namespace k3 {
template <typename T, typename = std::enable_if_t<sizeof(T) == 4>>
std::span<T, 4>
reinterpret(std::span<uint8_t, 16> src)
{
	return std::span<T, 4>(src.data());
}

Buffer::Buffer(size_t n) : fData(nullptr), fSize(n)
{
	fData = new uint8_t[n];
}

Buffer::~Buffer()
{
	delete[] fData;
}

Buffer &
Buffer::operator=(const Buffer &other)
{
	return *this;
}

bool
operator==(const Buffer &a, const Buffer &b)
{
	return a.fSize == b.fSize;
}
}
"""


# drivers/atm/horizon.c:934: a loop opened under `#ifndef X` and closed in the `#else` of a later `#ifdef X`;
# reading the first branch of each group left the body open, and the unit swallowed 40 functions.
OPPOSITE_CONDITIONS = """\
static void k3_rx(struct k3 *dev, int irq)
{
	int again = 0;
#ifndef K3_TAILCALLS
	again = 1;
	while (again) {
#endif
		k3_step(dev);
#if !defined(K3_TAILCALLS)
		again = k3_more(dev);
#endif
#ifdef K3_TAILCALLS
	if (again)
		return k3_rx(dev, 0);
	return;
#else
		irq = 0;
	}
	return;
#endif
}

static void k3_rx_done(struct k3 *dev)
{
	k3_rx(dev, 1);
}
"""


# drivers/dma/ioat/dma.c:575, mm/bootmem.c:342: functions named like the attribute macros `__cleanup(fn)` and
# `__free(fn)`; blanking them as attributes left headers without names (no unit of that name).
ATTRIBUTE_NAMED_FUNCTIONS = """\
static void __cleanup(struct k3_chan *chan, dma_addr_t done);

static void __cleanup(struct k3_chan *chan, dma_addr_t done)
{
	chan->tail = done;
}

static void __init __free(struct k3_data *data,
			unsigned long sidx, unsigned long eidx)
{
	k3_release(data, sidx, eidx);
}

static void k3_cleanup_all(struct k3_chan *chan)
{
	__cleanup(chan, 0);
}
"""


# drivers/hwmon/w83627ehf.c:942, XNU's `#define IMPL(T)`: functions written once in a #define and expanded at
# file level (785 of Linux's uncovered function lines); each #define is one unit at its definition.
MACRO_TEMPLATES = """\
#define show_in_reg(reg) \\
static ssize_t \\
show_##reg(struct device *dev, struct device_attribute *attr, \\
		char *buf) \\
{ \\
	struct k3_data *data = k3_update_device(dev); \\
	return sprintf(buf, "%ld\\n", data->reg); \\
}
show_in_reg(in)
show_in_reg(in_min)

#define IMPL(T) \\
static T k3_min_##T(T a, T b) { return a < b ? a : b; } \\
static T k3_max_ ## T(T a, T b) \\
{ \\
	return a > b ? a : b; \\
}
IMPL(int)

#define K3_ONE(x) do { if (x) { (x)++; } } while (0)
#define K3_INIT(name) static struct k3 name = { .n = 1 }
#define K3_GUARD(x) if (x) {
#define k3_for_each(i) for (({ k3_lock(); }), i = 0; i < 4; i++)

static int k3_after_templates(void)
{
	return 0;
}
"""


# drivers/md/bcache/sysfs.c:246: a macro expanded without a `;` (SHOW_LOCKED) before a function a macro heads
# (STORE) named the unit after the first; i915_trace.h:76: a loop inside TP_fast_assign, in the parentheses of
# a file-level TRACE_EVENT, was a unit named after the loop macro.
MACRO_CALLS = """\
static ssize_t k3_show_one(struct k3 *k, char *buf)
{
	return 0;
}
SHOW_LOCKED(k3_cached_dev)

STORE(__k3_cached_dev)
{
	return size;
}

TRACE_EVENT(k3_cxsr,
		TP_PROTO(struct k3 *k, bool old),
		TP_ARGS(k, old),
		TP_fast_assign(
				enum pipe pipe;
				for_each_pipe(k, pipe) {
					__entry->frame[pipe] = k3_frame(k, pipe);
				}
				__entry->old = old;
				),
		TP_printk("%d", __entry->old)
);

static int k3_after_trace(void)
{
	return 0;
}
subsys_initcall(k3_after_trace)

/* k3_last - after a call without its `;` (mm/oom_kill.c:656) */
static void k3_last(void)
{
	return;
}
"""


# Braces the preprocessor makes ambiguous where no rule of the normaliser reads them right (two conditions on
# one value): a function's `}` at column 0 followed by a header and a `{` at column 0 ends it, as ctags reads it.
AMBIGUOUS_BRACES = """\
static int k3_poll(struct k3 *k)
{
#if K3_VERSION > 2
	while (k3_busy(k)) {
#endif
		k3_wait(k);
#if K3_VERSION <= 2
	return 0;
#else
	}
	return 1;
#endif
}

static int k3_next_fn(struct k3 *k,
			int n)
{
	return n;
}
"""


CASES = [
    Case("loop-macro-and-user-cast", LOOP_WITH_CAST, [("k3_sum", 1, 13), ("k3_after", 15, 18)]),
    Case("syscall-ifdef-around-if", SYSCALL_IFDEF, [("sys_fanotify_init", 1, 18)]),
    Case("if-in-parameter-list", IF_IN_PARAMETERS, [("k3_open", 1, 10), ("k3_next", 12, 15)]),
    Case("printf-attribute", PRINTF_ATTRIBUTE, [("k3_log", 1, 8), ("k3_fmt", 10, 14)]),
    Case("sized-by-return-types", SIZED_BY, [("m_bigalloc", 1, 5), ("k3_description", 7, 11), ("k3_buf", 13, 16)]),
    Case("while-each-thread", WHILE_EACH_THREAD, [("k3_walk", 1, 12), ("k3_later", 14, 17)]),
    Case("statement-macros", STATEMENT_MACROS, [("k3_guarded", 1, 12), ("k3_exported", 15, 18)]),
    Case("loop-macros", LOOP_MACROS, [("k3_lists", 1, 22), ("k3_for_each_done", 24, 27)]),
    Case(
        "unbalanced-directives-at-file-level",
        UNBALANCED_HEADERS,
        [("k3_probe", 2, 7), ("key_output", 9, 19), ("k3_c_api", 24, 27)],
    ),
    Case(
        "define-and-parenthesised-names",
        DEFINE_IN_BODY,
        [("k3_flush", 1, 15), ("os_ref_release_named", 17, 21), ("k3_handler", 23, 26)],
    ),
    Case("attributes-after-the-parameters", TRAILING_ATTRIBUTES, [("bcmp", 1, 11), ("k3_checked", 13, 16)]),
    Case("k-and-r-definitions", K_AND_R, [("kdebug_sadb", 1, 6), ("ipsec_bindump", 14, 23)]),
    Case(
        "functions-named-like-attribute-macros",
        ATTRIBUTE_NAMED_FUNCTIONS,
        [("__cleanup", 3, 6), ("__free", 8, 12), ("k3_cleanup_all", 14, 17)],
    ),
    Case(
        "function-templates-in-defines",
        MACRO_TEMPLATES,
        [("show_##reg", 1, 8), ("k3_min_##T+k3_max_##T", 12, 17), ("k3_after_templates", 25, 28)],
    ),
    Case(
        "macro-calls-before-and-around-blocks",
        MACRO_CALLS,
        [
            ("k3_show_one", 1, 4),
            ("STORE(__k3_cached_dev)", 7, 10),
            ("TRACE_EVENT(k3_cxsr)", 12, 23),
            ("k3_after_trace", 25, 28),
            ("k3_last", 32, 35),
        ],
    ),
    Case("braces-the-preprocessor-leaves-ambiguous", AMBIGUOUS_BRACES, [("k3_poll", 1, 13), ("k3_next_fn", 15, 19)]),
    Case(
        "brace-closed-under-the-opposite-condition",
        OPPOSITE_CONDITIONS,
        [("k3_rx", 1, 21), ("k3_rx_done", 23, 26)],
    ),
    Case(
        "iokit-header",
        IOKIT_HEADER,
        [("K3Device::count", 13, 17), ("K3Device::as", 19, 24), ("K3Device::ready", 30, 34)],
        ".h",
    ),
    Case(
        "cpp-constructs",
        CPP_CONSTRUCTS,
        [
            ("reinterpret", 2, 7),
            ("Buffer::Buffer", 9, 12),
            ("Buffer::~Buffer", 14, 17),
            ("Buffer::operator=", 19, 23),
            ("operator==", 25, 29),
        ],
        ".h",
    ),
]
