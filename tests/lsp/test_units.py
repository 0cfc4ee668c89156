"""units: functions and kernel macro bodies become disjoint units with small, deterministic context."""

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from k3lsp.units import split as units
from tests.lsp.conftest import example_text


def spans(source: str) -> list[tuple[str, str, int, int]]:
    return [(u.name, u.kind, u.start_line + 1, u.end_line + 1) for u in units.split(source)]


def test_examples_split_into_their_functions_and_syscalls():
    assert spans(example_text("k3demo_chardev.c")) == [
        ("k3demo_write_msg", "function", 22, 40),
        ("k3demo_read_msg", "function", 42, 57),
        ("k3demo_ioctl", "function", 59, 71),
        ("k3demo_init", "function", 85, 88),  # `__init` is an ERROR node for tree-sitter
        ("k3demo_exit", "function", 90, 93),
    ]
    assert spans(example_text("k3demo_syscalls.c")) == [
        ("k3demo_alloc_table", "function", 25, 37),
        ("sys_k3demo_set_rules", "macro_body", 42, 63),  # call expression + stray block
        ("sys_k3demo_flush_tables", "macro_body", 65, 79),  # parsed as a definition typed SYSCALL_DEFINE0
    ]
    assert [s[0] for s in spans(example_text("k3demo_session.c"))] == [
        "k3demo_session_release",
        "k3demo_session_put",
        "k3demo_session_create",
        "k3demo_session_register",
    ]
    assert spans(example_text("k3demo.h")) == []
    assert units.split(example_text("k3demo.h")) == ()


def test_unit_text_is_its_whole_lines():
    source = example_text("k3demo_syscalls.c")
    lines = source.split("\n")
    for unit in units.split(source):
        assert unit.text == "\n".join(lines[unit.start_line : unit.end_line + 1])
        assert unit.file_line(unit.line_count) == unit.end_line
    flush = units.split(source)[2]
    assert "list_for_each_entry_safe" in flush.text and flush.text.endswith("}")


KERNELISMS = """\
static __always_inline int __must_check
helper(int x)
{
	return x;
}
COMPAT_SYSCALL_DEFINE2(k3_get, int, fd, compat_uptr_t __user *, p)
{
	return 0;
}
DEFINE_SHOW_ATTRIBUTE_BODY(k3_stats)
{
	seq_puts(m, "x");
	return 0;
}
int a(void) { return 1; } int b(void) { return 2; }
#ifdef CONFIG_K3
static long k3_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *p = (void __user *)arg;
	return 0;
}
#else
static long k3_ioctl(struct file *f, unsigned int cmd, unsigned long arg) { return -ENOTTY; }
#endif
"""


def test_kernel_macros_split_headers_and_shared_lines():
    assert spans(KERNELISMS) == [
        ("helper", "function", 1, 5),  # the `static __always_inline int` declaration is folded in
        ("compat_sys_k3_get", "macro_body", 6, 9),
        ("DEFINE_SHOW_ATTRIBUTE_BODY(k3_stats)", "macro_body", 10, 14),
        ("a+b", "function", 15, 15),  # two definitions on one line: one unit, never overlapping ones
        ("k3_ioctl", "function", 17, 21),
        ("k3_ioctl", "function", 23, 23),
    ]


MISREAD_HEADERS = """\
static SQLITE_WSD struct stat_type {
	int now[10];
} stat_value = { {0,}, {0,} };
BPF_CALL_2(bpf_map_lookup_elem, struct bpf_map *, map, void *, key)
{
	return (unsigned long) map->ops->map_lookup_elem(map, key);
}
static void (*dl_sym(void *p, const char *sym))(void){
	return 0;
}
SQLITE_API long long memory_used(void){
	return 1;
}
"""


def test_misread_headers_keep_their_function_names_and_data_is_context():
    assert spans(MISREAD_HEADERS) == [
        ("BPF_CALL_2(bpf_map_lookup_elem)", "macro_body", 4, 7),
        ("dl_sym", "function", 8, 10),  # returns a function pointer
        ("memory_used", "function", 11, 13),
    ]
    (item,) = [i for i in units.parse(MISREAD_HEADERS).items if "stat_type" in i.names]
    assert item.kind == "global" and item.start_line == 0  # a struct seen as a "function": context


UNBALANCED = """\
static int win_write(int fd)
{
#if WINCE
	if (fd) {
#else
	{
#endif
		fd++;
	}
	return fd;
}

static int after_one(void)
{
	return 1;
}

static int after_two(void)
{
	return 2;
}
"""


def test_definitions_swallowed_by_unbalanced_braces_become_their_own_units():
    got = spans(UNBALANCED)
    names = [g[0] for g in got]
    assert names[0] == "win_write" and "after_one" in names and "after_two" in names
    assert ("after_one", "function", 13, 16) in got and ("after_two", "function", 18, 21) in got
    assert_disjoint(units.split(UNBALANCED))


def test_context_holds_what_the_body_uses_and_how_it_is_reached():
    by_name = {u.name: u for u in units.split(example_text("k3demo_chardev.c"))}
    ioctl = by_name["k3demo_ioctl"]
    assert "#include <linux/uaccess.h>" in ioctl.context
    assert "static long k3demo_write_msg(void __user *argp);" in ioctl.context  # prototype of a callee
    assert ".unlocked_ioctl\t= k3demo_ioctl" in ioctl.context  # the ops struct that reaches it
    assert "struct k3demo_slot {" not in ioctl.context  # not used by this function
    write = by_name["k3demo_write_msg"]
    assert "struct k3demo_slot {" in write.context and "k3demo_slots[K3DEMO_NR_SLOTS]" in write.context
    assert "DEFINE_MUTEX(k3demo_lock)" in write.context
    assert "k3demo_fops" not in write.context


def test_context_follows_macros_transitively_and_stays_bounded():
    source = "#define A (B + 1)\n#define B (C * 2)\n#define C 3\n#define UNUSED 4\nint f(void)\n{\n\treturn A;\n}\n"
    (unit,) = units.split(source)
    assert unit.context == "#define A (B + 1)\n#define B (C * 2)\n#define C 3"
    big = "".join(f"#define M{i} {'x' * 200}\n" for i in range(200))
    body = " + ".join(f"M{i}" for i in range(200))
    (unit,) = units.split(big + f"int g(void)\n{{\n\treturn {body};\n}}\n")
    assert len(unit.context) <= units.MAX_CONTEXT_CHARS


def test_every_unit_of_a_file_sends_the_files_shared_context():
    """One text for the whole file (one cached prompt prefix per file) that holds every unit's own context;
    the keys stay the units' own (an unrelated declaration does not make every unit new)."""
    split = units.split(example_text("k3demo_chardev.c"))
    shared = {u.sent_context for u in split}
    assert len(split) > 2 and len(shared) == 1
    (text,) = shared
    for u in split:
        assert all(line in text for line in u.context.split("\n")), u.name
        assert u.key == units.unit_key(u.text, u.context)
    assert len(text) < sum(len(u.context) for u in split)  # each declaration once
    unrelated = units.split(example_text("k3demo_chardev.c").replace("#include", "#define UNUSED_X 1\n#include", 1))
    assert [u.key for u in unrelated] == [u.key for u in split]


def test_a_file_context_over_the_cap_falls_back_to_each_units_own():
    defs = "".join(f"#define M{i} {'x' * 400}\n" for i in range(200))
    funcs = "".join(f"int f{i}(void)\n{{\n\treturn M{i};\n}}\n" for i in range(200))
    split = units.split(defs + funcs)
    assert all(u.file_context == "" and u.sent_context == u.context for u in split)
    assert len({u.sent_context for u in split}) == 200


def test_key_is_a_content_address():
    source = example_text("k3demo_syscalls.c")
    first = units.split(source)
    assert [u.key for u in first] == [u.key for u in units.split(source)]
    assert all(re.fullmatch(r"[0-9a-f]{64}", u.key) for u in first)
    moved = units.split("/* three\n * new\n * lines */\n" + source)
    assert [u.key for u in moved] == [u.key for u in first]  # moving a function does not change it
    assert [u.start_line for u in moved] == [u.start_line + 3 for u in first]
    edited = units.split(source.replace("if (flags)\n\t\treturn -EINVAL;", "if (flags & 1)\n\t\treturn -EINVAL;"))
    assert [a.key == b.key for a, b in zip(first, edited, strict=True)] == [True, False, True]
    # A macro the unit uses is part of its context, so changing it changes the key; others do not.
    dep = units.split(source.replace("K3DEMO_MAX_RULES\t4096", "K3DEMO_MAX_RULES\t8192"))
    assert [u.key for u in dep] == [u.key for u in first]  # nobody uses K3DEMO_MAX_RULES
    retyped = units.split(source.replace("\tu32 nr_rules;\n\tstruct", "\tu64 nr_rules;\n\tstruct"))
    assert all(a.key != b.key for a, b in zip(first, retyped, strict=True))  # all use struct k3demo_table


def test_context_items_name_the_file_level_definitions():
    parsed = units.parse(example_text("k3demo_chardev.c"))
    kinds = {(i.kind, i.names) for i in parsed.items}
    assert ("type", ("k3demo_slot",)) in kinds and ("global", ("k3demo_fops",)) in kinds


def test_bad_input_never_crashes():
    assert units.split("") == ()
    assert units.split(b"\xff\xfe\x00garbage {{{ ((( ") is not None
    (unit,) = units.split(b"int f(void)\n{\n\treturn '\xe9';\n}\n")  # latin-1 byte: replaced, kept
    assert unit.name == "f" and "\ufffd" in unit.text


# --- property: every line of every function belongs to exactly one unit -----------------------------------

FUNCTIONS = [
    (
        "{n}",
        "static int {n}(struct device *dev)\n{{\n\tint ret = 0;\n\n\tif (!dev)\n\t\treturn -EINVAL;\n\treturn ret;\n}}",
    ),
    ("{n}", "static int __init {n}(void)\n{{\n\treturn platform_driver_register(&drv);\n}}"),
    (
        "sys_{n}",
        "SYSCALL_DEFINE3({n}, int, fd, void __user *, buf, size_t, len)\n{{\n\tif (len > PAGE_SIZE)\n"
        "\t\treturn -EINVAL;\n\treturn 0;\n}}",
    ),
    (
        "{n}",
        "static void {n}(struct list_head *head)\n{{\n\tstruct item *pos, *tmp;\n\n"
        "\tlist_for_each_entry_safe(pos, tmp, head, node) {{\n\t\tlist_del(&pos->node);\n\t\tkfree(pos);\n\t}}\n}}",
    ),
    ("{n}", "static __always_inline int __must_check\n{n}(u32 x)\n{{\n\treturn x & 1;\n}}"),
    (
        "{n}",
        "long {n}(struct file *f, unsigned int cmd, unsigned long arg)\n{{\n"
        "\tvoid __user *p = (void __user *)arg;\n\n\tswitch (cmd) {{\n\tcase 1:\n"
        "\t\treturn copy_to_user(p, &f->f_pos, sizeof(f->f_pos)) ? -EFAULT : 0;\n\tdefault:\n"
        "\t\treturn -ENOTTY;\n\t}}\n}}",
    ),
    ("{n}", 'static ssize_t {n}(struct kobject *kobj, char *buf)\n{{\n\treturn sysfs_emit(buf, "%d\\n", 1);\n}}'),
]
BETWEEN = [
    "",
    "/* comment */",
    "#define FOO_{i} 1",
    "static DEFINE_MUTEX(lock_{i});",
    "struct s_{i} {{\n\tint a;\n\tvoid (*cb)(int);\n}};",
    "static const struct file_operations fops_{i} = {{\n\t.owner = THIS_MODULE,\n}};",
    "module_init(init_{i});",
    "EXPORT_SYMBOL_GPL(sym_{i});",
    "static int proto_{i}(int);",
]


@st.composite
def kernel_files(draw):
    """A C file of kernel-style functions separated by top-level noise, with each function's lines."""
    lines: list[str] = []
    truth: list[tuple[str, int, int]] = []
    for i in range(draw(st.integers(1, 8))):
        for _ in range(draw(st.integers(0, 2))):
            lines += BETWEEN[draw(st.integers(0, len(BETWEEN) - 1))].format(i=i).split("\n")
        name_t, body_t = FUNCTIONS[draw(st.integers(0, len(FUNCTIONS) - 1))]
        wrapped = draw(st.booleans())
        if wrapped:
            lines.append(f"#ifdef CONFIG_F{i}")
        body = body_t.format(n=f"fn_{i}").split("\n")
        truth.append((name_t.format(n=f"fn_{i}"), len(lines), len(lines) + len(body) - 1))
        lines += body
        if wrapped:
            lines.append("#endif")
    return "\n".join(lines) + "\n", truth


def assert_disjoint(us: list[units.Unit]) -> None:
    for a, b in itertools.pairwise(us):
        assert a.start_line <= a.end_line < b.start_line <= b.end_line


@settings(max_examples=150, deadline=None)
@given(kernel_files())
def test_every_function_line_belongs_to_exactly_one_unit(case):
    source, truth = case
    us = units.split(source)
    assert_disjoint(us)
    for name, start, end in truth:
        for line in range(start, end + 1):
            owners = [u for u in us if u.start_line <= line <= u.end_line]
            assert len(owners) == 1, (name, line, source)
        owner = next(u for u in us if u.start_line <= start <= u.end_line)
        assert owner.start_line == start and owner.end_line == end and owner.name == name, (owner, source)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["k3demo_chardev.c", "k3demo_syscalls.c", "k3demo_session.c"]),
    st.lists(
        st.tuples(st.integers(0, 120), st.sampled_from(["", "{", "}", "#if X", "#endif", "foo(", "int", "/*", "*/"])),
        max_size=6,
    ),
)
def test_mutated_files_still_give_disjoint_whole_line_units(name, mutations):
    lines = example_text(name).split("\n")
    for at, junk in mutations:
        lines.insert(at % (len(lines) + 1), junk)
    source = "\n".join(lines)
    us = units.split(source)
    assert_disjoint(us)
    for u in us:
        assert u.text == "\n".join(lines[u.start_line : u.end_line + 1])
        assert u.key == units.unit_key(u.text, u.context)
