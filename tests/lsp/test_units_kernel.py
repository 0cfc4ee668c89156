"""units on kernel idioms: every function comes out whole, named after itself, and nothing else is a unit.

Each case is minimal C for a construct that once cut a function short, dropped it, swallowed the rest of the
file or named a unit after a keyword or a loop macro (issue 23: Linux 4.19 and XNU xnu-11417.101.15 against
universal-ctags' function extents); ``functions`` lists each function's name and its first and last line
(1-based), and ``assert_whole`` checks the invariant: every line of each is in exactly one unit, the
unit that starts and ends with it and carries its name, and units never overlap.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lsp import kernelc, options, units


def functions(source: str) -> list[tuple[str, int, int]]:
    return [(u.name, u.start_line + 1, u.end_line + 1) for u in units.split(source)]


def assert_whole(source: str, truth: list[tuple[str, int, int]], macros: kernelc.Macros = kernelc.DEFAULT_MACROS):
    split = units.split(source, macros)
    for a, b in itertools.pairwise(split):
        assert a.end_line < b.start_line, (a.name, b.name)
    lines = source.split("\n")
    for u in split:
        assert u.text == "\n".join(lines[u.start_line : u.end_line + 1])
    for name, first, last in truth:
        for line in range(first - 1, last):
            owners = [u for u in split if u.start_line <= line <= u.end_line]
            assert len(owners) == 1, (name, line + 1, [u.name for u in split])
        (owner,) = [u for u in split if u.start_line <= first - 1 <= u.end_line]
        assert (owner.name, owner.start_line + 1, owner.end_line + 1) == (name, first, last), source
    assert [(u.name, u.start_line + 1, u.end_line + 1) for u in split] == truth


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


@pytest.mark.parametrize(
    ("source", "truth"),
    [
        (LOOP_WITH_CAST, [("k3_sum", 1, 13), ("k3_after", 15, 18)]),
        (SYSCALL_IFDEF, [("sys_fanotify_init", 1, 18)]),
        (IF_IN_PARAMETERS, [("k3_open", 1, 10), ("k3_next", 12, 15)]),
        (PRINTF_ATTRIBUTE, [("k3_log", 1, 8), ("k3_fmt", 10, 14)]),
        (SIZED_BY, [("m_bigalloc", 1, 5), ("k3_description", 7, 11), ("k3_buf", 13, 16)]),
        (WHILE_EACH_THREAD, [("k3_walk", 1, 12), ("k3_later", 14, 17)]),
        (STATEMENT_MACROS, [("k3_guarded", 1, 12), ("k3_exported", 15, 18)]),
        (LOOP_MACROS, [("k3_lists", 1, 22), ("k3_for_each_done", 24, 27)]),
        (UNBALANCED_HEADERS, [("k3_probe", 2, 7), ("key_output", 9, 19), ("k3_c_api", 24, 27)]),
        (DEFINE_IN_BODY, [("k3_flush", 1, 15), ("os_ref_release_named", 17, 21), ("k3_handler", 23, 26)]),
        (TRAILING_ATTRIBUTES, [("bcmp", 1, 11), ("k3_checked", 13, 16)]),
        (K_AND_R, [("kdebug_sadb", 1, 6), ("ipsec_bindump", 14, 23)]),
    ],
    ids=[
        "loop-macro-and-user-cast",
        "syscall-ifdef-around-if",
        "if-in-parameter-list",
        "printf-attribute",
        "sized-by-return-types",
        "while-each-thread",
        "statement-macros",
        "loop-macros",
        "unbalanced-directives-at-file-level",
        "define-and-parenthesised-names",
        "attributes-after-the-parameters",
        "k-and-r-definitions",
    ],
)
def test_each_function_comes_out_whole_and_named(source, truth):
    assert_whole(source, truth)


def test_no_unit_is_named_after_a_keyword_or_a_loop_macro():
    names = {u.name for s in (LOOP_WITH_CAST, SYSCALL_IFDEF, WHILE_EACH_THREAD, LOOP_MACROS) for u in units.split(s)}
    assert not names & {"if", "for", "while", "for_each_possible_cpu", "list_for_each_entry_safe", "TAILQ_FOREACH"}


def test_the_normalised_text_keeps_every_offset_and_line():
    for source in (LOOP_WITH_CAST, SYSCALL_IFDEF, IF_IN_PARAMETERS, WHILE_EACH_THREAD, DEFINE_IN_BODY):
        data = source.encode()
        text = kernelc.normalise(data).text
        assert len(text) == len(data)
        assert [i for i, c in enumerate(text) if c == 10] == [i for i, c in enumerate(data) if c == 10]
    text = kernelc.normalise(LOOP_WITH_CAST.encode()).text.decode()
    assert "while(1)" in text and "__user" not in text and "for_each_possible_cpu" not in text
    assert "(void        *)arg" in text


def test_unit_text_and_context_come_from_the_original_bytes():
    (unit, _) = units.split(LOOP_WITH_CAST)
    assert "for_each_possible_cpu(cpu) {" in unit.text and "(void __user *)arg" in unit.text
    (syscall,) = units.split(SYSCALL_IFDEF)
    assert "#ifdef CONFIG_AUDITSYSCALL" in syscall.text and "#else" in syscall.text
    assert '"%s: flags=%x event_f_flags=%x\\n"' in syscall.text  # string contents are blanked only for parsing


def test_a_long_file_after_while_each_thread_is_not_swallowed():
    tail = "".join(f"static int k3_f{i}(void)\n{{\n\treturn {i};\n}}\n\n" for i in range(50))
    split = units.split(WHILE_EACH_THREAD + "\n" + tail)
    assert [u.name for u in split] == ["k3_walk", "k3_later", *(f"k3_f{i}" for i in range(50))]
    assert all(u.line_count == 4 for u in split[2:])


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


def test_a_cpp_header_is_read_as_cpp_by_its_content():
    text = kernelc.normalise(IOKIT_HEADER.encode())
    assert text.cpp
    assert not kernelc.normalise(LOOP_MACROS.encode()).cpp
    assert not kernelc.normalise(b"struct k3 {\n\tint class;\n};\n/* class K3 : public X { */\n").cpp
    assert kernelc.normalise(b'extern "C++" {\nint f(void);\n}\n').cpp
    assert_whole(IOKIT_HEADER, [("K3Device::count", 13, 17), ("K3Device::as", 19, 24), ("K3Device::ready", 30, 34)])
    split = units.split(IOKIT_HEADER)
    assert "class K3Device : public IOService" in split[0].context  # the class is context of its methods


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


def test_cpp_names_are_qualified_and_templates_constructors_and_operators_are_read():
    assert_whole(
        CPP_CONSTRUCTS,
        [
            ("reinterpret", 2, 7),
            ("Buffer::Buffer", 9, 12),
            ("Buffer::~Buffer", 14, 17),
            ("Buffer::operator=", 19, 23),
            ("operator==", 25, 29),
        ],
    )


CUSTOM_ATTRIBUTE = """\
static int K3_SECTION(".k3") k3_table[4] = { 1, 2, 3, 4 };

int k3_lookup(int i)
{
	return k3_table[i & 3];
}
"""


def test_the_users_table_extends_the_defaults():
    """An attribute macro tree-sitter does not know misreads the declaration it is in: the function using
    the table gets no context for it, until the setting names the macro."""
    (unit,) = units.split(CUSTOM_ATTRIBUTE)
    assert "k3_table[4]" not in unit.context
    opts, errors = options.parse({"kernelMacros": {"attributes": ["K3_SECTION()"], "loops": ["k3_walk_*"]}})
    assert errors == []
    assert "K3_SECTION()" in opts.kernel_macros.attributes and "__user" in opts.kernel_macros.attributes
    assert opts.kernel_macros.kind_of("k3_walk_list") == "loops" and repr(opts.kernel_macros).endswith("2 entries")
    (unit,) = units.split(CUSTOM_ATTRIBUTE, opts.kernel_macros)
    assert 'static int K3_SECTION(".k3") k3_table[4] = { 1, 2, 3, 4 };' in unit.context  # the original text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "expected an object"),
        ({"loop": ["x"]}, "unknown key 'loop'"),
        ({"loops": "for_each_*"}, "expected a list"),
        ({"attributes": ["__user", "a b"]}, "'a b' is not a macro name"),
        ({"statements": ["*"]}, "'*' is not a macro name"),
        ({"loops": ["for_each_" + "x" * 300]}, "is not a macro name"),
        ({"loops": ["x"] * 2001}, "at most 2000"),
    ],
)
def test_a_bad_macro_table_is_reported_and_the_defaults_kept(value, message):
    opts, errors = options.parse({"kernelMacros": value, "trigger": "open"})
    assert len(errors) == 1 and message in errors[0], errors
    assert opts.kernel_macros == kernelc.DEFAULT_MACROS and opts.trigger == "open"


def test_a_megabyte_file_splits_whole():
    """The bench (bench/kernel_scale.py) times this shape; here only that every function is found."""
    body = "".join(f"#include <linux/k3_{i}.h>\n" for i in range(300))
    body += "".join(
        LOOP_WITH_CAST.replace("k3_sum", f"k3_sum{i}").replace("k3_after", f"k3_after{i}") for i in range(3500)
    )
    assert len(body) > 1_000_000
    split = units.parse(body).units
    assert len(split) == 7000 and split[-1].name == "k3_after3499"


# --- property: generated kernel C with macros and directives sprinkled in -------------------------------------

HEADERS = [
    "static int {n}(struct device *dev)",
    "static __always_inline int __must_check\n{n}(u32 x)",
    "static __printf(2, 3) void {n}(struct device *dev, const char *fmt, ...)",
    "static void *__sized_by(len)\n{n}(size_t len)",
    "int {n}(struct inode *inode,\n#ifdef CONFIG_{N}\n\tstruct file *file,\n#endif\n\tint flags)",
    "long\n#ifdef __APPLE__\n{n}(struct file *f, unsigned long arg)\n#else\n{n}(f, arg)\nstruct file *f;\n#endif",
    "SYSCALL_DEFINE3({n}, int, fd, char __user *, buf, size_t, count)",
]
STATEMENTS = [
    "\tint ret = 0;",
    "\tvoid __user *p = (void __user *)arg;",
    "\tfor_each_possible_cpu(cpu) {{\n\t\tret += per_cpu(c, cpu);\n\t}}",
    "\tlist_for_each_entry_safe(pos, tmp, head, node) {{\n\t\tkfree(pos);\n\t}}",
    "\tdo {{\n\t\tvisit(t);\n\t}} while_each_thread(p, t);",
    "#ifdef CONFIG_X\n\tif (a) {{\n#else\n\tif (b) {{\n#endif\n\t\tret = 1;\n\t}}",
    "#ifdef CONFIG_AUDIT\n\tif (flags & ~(A | B))\n#else\n\tif (flags & ~A)\n#endif\n\t\treturn -EINVAL;",
    "\t__unreachable_ok_push\n\tret++;\n\t__unreachable_ok_pop",
    '\tpr_info("{{ unbalanced in a string\\n");',
    "\t/* }} unbalanced in a comment */",
    "#define LOCAL_{N}(x) do {{ if (x) {{ (x)++; }} }} while (0)",
    "\tif (!capable(CAP_SYS_ADMIN))\n\t\treturn -EPERM;",
]
BETWEEN = [
    "",
    "/* comment with a {{ brace */",
    "#define FOO_{i} {{",
    "static DEFINE_MUTEX(lock_{i});",
    "struct s_{i} {{\n\tint a;\n#ifdef CONFIG_S\n\tint b;\n#endif\n}};",
    "static const struct file_operations fops_{i} = {{\n\t.owner = THIS_MODULE,\n}};",
    "EXPORT_SYMBOL_GPL(sym_{i});",
    "#if 0\nstatic int dead_{i}(void);\n#endif",
]


@st.composite
def kernel_files(draw):
    """A file of kernel-style functions (header idioms, bodies with macros and directives) between
    top-level noise, with each function's name and lines."""
    lines: list[str] = []
    truth: list[tuple[str, int, int]] = []
    for i in range(draw(st.integers(1, 6))):
        for _ in range(draw(st.integers(0, 2))):
            lines += draw(st.sampled_from(BETWEEN)).format(i=i).split("\n")
        n = f"k3_fn{i}"
        header = draw(st.sampled_from(HEADERS))
        body = [s.format(N=f"N{i}") for s in draw(st.lists(st.sampled_from(STATEMENTS), max_size=5))]
        text = header.format(n=n, N=f"N{i}") + "\n{\n" + "\n".join(body) + ("\n" if body else "") + "\treturn 0;\n}"
        wrapped = draw(st.booleans())
        if wrapped:
            lines.append(f"#ifdef CONFIG_F{i}")
        name = f"sys_{n}" if header.startswith("SYSCALL") else n
        truth.append((name, len(lines) + 1, len(lines) + text.count("\n") + 1))
        lines += text.split("\n")
        if wrapped:
            lines.append("#endif")
    return "\n".join(lines) + "\n", truth


@settings(max_examples=200, deadline=None)
@given(kernel_files())
def test_every_line_of_every_generated_function_is_in_exactly_its_unit(case):
    source, truth = case
    assert_whole(source, truth)
