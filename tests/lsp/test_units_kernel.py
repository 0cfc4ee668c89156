"""units on kernel idioms: every function comes out whole, named after itself, and nothing else is a unit.

Each case (tests/support/kernel_idioms.py) is minimal C for a construct that once cut a function short,
dropped it, swallowed the rest of the file or named a unit after a keyword or a loop macro (issue 23: Linux
4.19 and XNU xnu-11417.101.15 against universal-ctags' function extents); ``assert_whole`` checks the
invariant: every line of each function is in exactly one unit, the unit that starts and ends with it and
carries its name, and units never overlap.
"""

from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lsp.core import options
from k3lsp.units import kernelc
from k3lsp.units import split as units
from tests.support.kernel_idioms import (
    CASES,
    CPP_CONSTRUCTS,
    DEFINE_IN_BODY,
    IF_IN_PARAMETERS,
    IOKIT_HEADER,
    LOOP_MACROS,
    LOOP_WITH_CAST,
    MACRO_TEMPLATES,
    SYSCALL_IFDEF,
    WHILE_EACH_THREAD,
)


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


@pytest.mark.parametrize("case", [c for c in CASES if c.suffix == ".c"], ids=lambda c: c.name)
def test_each_function_comes_out_whole_and_named(case):
    assert_whole(case.source, case.truth)


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


INCLUDED_BODY = """// SPDX-License-Identifier: GPL-2.0
/*
 * Generic data width independent code which is included by the wrappers.
 */
{
\tstruct rs_codec *rs = rsc->codec;
\tint i, count = 0;

\tif (rs->nroots == 0)
\t\treturn -1;
#ifdef CONFIG_K3_DEBUG
\tfor (i = 0; i < rs->nn; i++) {
\t\tcount++;
\t}
#endif
\tdo {
\t\ti--;
\t} while (i);
\treturn count;
}
"""


def test_a_file_that_is_a_function_body_included_elsewhere_is_one_unit():
    """lib/reed_solomon/decode_rs.c is the body of decode_rs8 and decode_rs16: reed_solomon.c `#include`s it between
    their braces. No header names it and ctags sees no function there, only its locals; the splitter reads a text,
    not its path, so the body is one stray block, ``block@LINE``, whatever loops and #if groups it holds, and its
    locals are not context (a unit named after the file would need the path, which a split does not have)."""
    assert_whole(INCLUDED_BODY, [("block@5", 5, 20)])
    (unit,) = units.split(INCLUDED_BODY)
    assert unit.kind == "block" and "rs_codec" not in unit.context


def test_the_macro_table_reaches_the_splitter_process_without_its_memo_and_stays_one_table_there():
    """Every split sent the table to the splitter's process with the memo of every identifier it had looked up (2.3 MB
    once warm), and the worker, given a new table with each split, looked every identifier of every file up again
    (fs/ of Linux: 125 s instead of 8.5). Now it goes as its entries and comes out as the one table of those entries."""
    units.split("".join(f"int k3_v{i};\n" for i in range(5000)))  # 5,000 names in the memo
    sent = pickle.dumps(kernelc.DEFAULT_MACROS)
    assert len(sent) < 20_000
    assert pickle.loads(sent) is pickle.loads(pickle.dumps(kernelc.DEFAULT_MACROS))
    custom = kernelc.Macros.parse({"loops": ["k3_each_*"]})
    assert pickle.loads(pickle.dumps(custom)) == custom and pickle.loads(pickle.dumps(custom)).kind_of("k3_each_x")


def test_a_function_template_in_a_define_is_one_unit_at_its_definition_with_its_expansions_as_context():
    """The #define is the unit (its parameters say what the pasted names become); the lines that expand it
    show what it is expanded to; a #define of a statement, an initialiser or an unbalanced brace is not one."""
    show, impl, after = units.split(MACRO_TEMPLATES)
    assert (show.kind, impl.kind, after.kind) == ("macro_template", "macro_template", "function")
    assert show.text.startswith("#define show_in_reg(reg) \\\nstatic ssize_t") and show.text.endswith("}")
    assert "show_in_reg(in)\nshow_in_reg(in_min)" in show.context
    assert "IMPL(int)" in impl.context and "show_in_reg(in)" not in impl.context


def test_a_cpp_header_is_read_as_cpp_by_its_content():
    text = kernelc.normalise(IOKIT_HEADER.encode())
    assert text.cpp
    assert not kernelc.normalise(LOOP_MACROS.encode()).cpp
    assert not kernelc.normalise(b"struct k3 {\n\tint class;\n};\n/* class K3 : public X { */\n").cpp
    assert kernelc.normalise(b'extern "C++" {\nint f(void);\n}\n').cpp
    (case,) = [c for c in CASES if c.source is IOKIT_HEADER]
    assert_whole(IOKIT_HEADER, case.truth)
    split = units.split(IOKIT_HEADER)
    assert "class K3Device : public IOService" in split[0].context  # the class is context of its methods


def test_cpp_names_are_qualified_and_templates_constructors_and_operators_are_read():
    (case,) = [c for c in CASES if c.source is CPP_CONSTRUCTS]
    assert_whole(CPP_CONSTRUCTS, case.truth)


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


SOUP = [
    *("{", "}", "(", ")", ";", "\n", "\r\n", "\\\n", "/*", "*/", "//", '"', "'", ",", "=", "<", ">", "::"),
    *("#if X\n", "#else\n", "#endif\n", "#define A {\n", "int ", "f", "struct ", "do ", 'extern "C" '),
    *("for_each_x", "while_each_thread", "__user", "__printf", "SYSCALL_DEFINE2(", "class X ", "template<"),
    *("public:", "operator", "\x00", "\ufffd"),
    *("##", "#define T(x) int f##x(void) { return 0; }\n", "__cleanup(", "#ifndef X\n", "#ifdef X\n", "\n}\n"),
    *("TRACE_EVENT(", "SHOW_LOCKED(a)\n", "STORE(b)\n"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(SOUP), max_size=120))
def test_any_token_soup_splits_into_disjoint_whole_line_units(tokens):
    """Unbalanced braces, unterminated comments and strings, stray directives, C++ and kernel words in any
    order: never a crash, units never overlap, each is whole lines of the original text."""
    source = "".join(tokens)
    split = units.split(source)
    lines = source.split("\n")
    for a, b in itertools.pairwise(split):
        assert a.end_line < b.start_line
    for u in split:
        assert u.text == "\n".join(lines[u.start_line : u.end_line + 1])
