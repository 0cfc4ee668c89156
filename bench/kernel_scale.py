"""Kernel scale: the editor side on a whole kernel tree (XNU, a Linux checkout, any C tree).

    uv run python bench/kernel_scale.py TREE [--list-misses N]
    uv run python bench/kernel_scale.py --quick        # a small tree the script builds (what tests/bench runs)

TREE is a directory; the files are those a workspace audit visits with the default settings (`include`
`**/*.c`, `**/*.h`, `exclude`, `maxFileBytes`: k3lsp.core.options). One function per section, called by `main`:

- **splitter** (`splitter`): every file is split with `units.parse` (uncached, what a changed text costs) and
  checked against universal-ctags' function extents (`ctags --fields=+ne`: line and `end:` of every function
  definition; a `.h` file is read by ctags as C++ when k3lsp reads it as C++, as C otherwise), the
  independent check:
  - `ratio function_lines_covered = X`: lines inside ctags function extents that some unit covers, over all
    such lines (target on XNU >= 0.9999). Lines of tags ctags itself mislabels are excluded and listed with
    the reason (`--list-misses` also lists the uncovered lines' functions);
  - `units_named_after_non_functions = N` (target 0): units over a ctags function named after none of the
    functions there (a keyword, a loop macro, another name), plus units named after a C keyword or a
    loop macro of the table anywhere;
  - `macro templates: N units holding M functions`: the #defines that hold functions (units/templates.py), each
    one unit; ctags' tag at a line expanding one (`show_in_reg(in)`, stretched over what follows) is excluded;
  - `units_over_several_functions = N` (target 0): units that hold more whole ctags functions than their
    name says (one function swallowed the next; ctags' tags of loop macros do not count);
  - split time for the whole tree, through the splitter the language server uses (k3lsp.units.splitting:
    a worker process per core, a few files in flight each): wall time, and CPU time of the workers and of
    this process (which reads the files and receives the units); beside it tree-sitter's bare parse of the
    same bytes, in as many processes (`ratio split_over_parse = X`: split CPU over parse CPU, what the
    normalisation, the brace scan and the context cost on top of the parse); the largest file's split in
    this process.
- **language server** (`server`): hover p50, p99 and max on an open file while a workspace audit of the whole
  tree (scope `all`) runs on the fake daemon of the logic tests (target p99 <= 50 ms), beside the same hover idle
  in the same run (`ratio hover_p99_busy_over_idle = X`), the audit's time and its diagnostic refreshes, and the
  load average after.
- **workspace tools**: the model's `find_definition`, `find_references` and `grep` (k3lsp.tools.sandbox.run_tool)
  on TREE, the symbol index built first in a fresh cache directory (a temporary K3LSP_CACHE_DIR: the user's
  cache is not touched).
  - `ratio find_definition_found = X`: over SYMBOLS (Linux's and XNU's; those universal-ctags, run on the whole
    tree independently of the index, does not define are left out and listed), the share whose answer's first
    place is a definition (not a prototype) that ctags lists for the symbol. Target on XNU: 1.0.
  - index build time (wall, and CPU in its child processes beside this process's, which stands for the
    server's) and size (the sqlite file and its log) over the C and C++ source's (`ratio
    index_size_over_source = X`, target <= 0.25), beside universal-ctags alone on the whole tree (`ratio
    index_build_vs_ctags = X`), a refresh of the whole tree with nothing changed, and a file added and removed
    at the tree's root (named after this process, removed whatever happens) as the change notices bring it in,
    beside the same change followed by a whole refresh, the notices off (`ratio notice_refresh_cpu_over_whole =
    X`: the refresh's CPU in its child).
  - tool call p50/p90 per tool after the index is built: `find_references` and `grep` of a whole word
    (`\\bname\\b`) from the occurrence index (target p90 <= 100 ms), `grep` of a regex (`name\\s*\\(`) with
    ripgrep (target p90 <= 1 s at load <= 2), and ripgrep's whole-word search alone (what `find_references`
    does without the index); `grep` of the regex beside bare ripgrep on the same patterns (`ratio
    grep_vs_bare_ripgrep = X`: the sandbox's own work on top of the search). The load average is printed
    before and after.

Needs universal-ctags on PATH (Debian/Ubuntu: `apt-get install universal-ctags`; macOS: `brew install
universal-ctags`); without it the splitter section prints the split times only and says why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for tests.support (run as a script from anywhere)

from tree_sitter import Parser  # noqa: E402

from k3lsp.core import options  # noqa: E402
from k3lsp.tools import sandbox, search, symbols  # noqa: E402
from k3lsp.units import kernelc, splitting, templates  # noqa: E402
from k3lsp.units import split as units  # noqa: E402
from tests.support import kernel_idioms  # noqa: E402  # the kernel idioms, their functions known in advance

# Names a unit must never have (a statement keyword; C++ words a broken header may leave).
KEYWORDS = frozenset(
    {
        *("if", "else", "for", "while", "do", "switch", "case", "return", "sizeof", "typeof", "goto", "default"),
        *("break", "continue", "asm", "__asm__", "struct", "union", "enum", "typedef", "static", "extern"),
        *("inline", "const", "volatile"),
    }
)
C11_KEYWORDS = frozenset({"_Atomic", "_Alignas", "_Noreturn", "_Static_assert", "_Thread_local"})
MACRO = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SYSCALL = re.compile(r"^(COMPAT_)?SYSCALL_DEFINE\d$")
TAIL = ("--kinds-C++=f", "-L", "-", "-o", "-")  # function definitions only; file names on stdin
ROUNDS = 3
SECTIONS = ("splitter", "tools", "server")
QUICK_SYMBOLS = ("k3demo_ioctl", "k3demo_session_put", "k3demo_write_msg")  # defined in examples/
# Common kernel symbols: Linux's (issue 23's list) and XNU's. Each counts where ctags defines it in TREE.
SYMBOLS = (
    *("copy_from_user", "sk_buff", "kmalloc", "mutex_lock", "tcp_ack", "container_of", "task_struct"),
    *("vfs_read", "kvm_vcpu_ioctl", "tcp_rcv_established", "kfree", "spin_lock"),
    *("copyin", "vm_map_copyin", "ipc_port_release", "kauth_cred_get", "vnode_put", "m_freem", "ipc_kmsg_send"),
    *("vm_map_enter", "zalloc", "sysctl_handle_int", "ipc_port_t", "mbuf", "IOMalloc"),
)


@dataclass
class Tag:
    """One function definition as ctags reports it (1-based lines, end inclusive)."""

    name: str
    line: int
    end: int


@dataclass
class FileResult:
    """One file of the tree as the splitter saw it."""

    path: Path
    size: int
    parse_s: float  # tree-sitter's bare parse, CPU
    split: tuple[units.Unit, ...]
    cpp: bool
    tags: list[Tag] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path, help="the tree to measure")
    parser.add_argument("--quick", action="store_true", help="a small tree built by the script")
    parser.add_argument("--list-misses", type=int, default=20, metavar="N", help="list N uncovered functions")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="run only this section (repeatable)")
    args = parser.parse_args(argv)
    only = set(args.only or SECTIONS)
    if args.quick == (args.tree is not None):
        parser.error("give a TREE or --quick")
    machine()
    with tempfile.TemporaryDirectory() as scratch:
        tree = quick_tree(Path(scratch)) if args.quick else args.tree.resolve()
        files = list(options.admitted_files(tree, tree, options.Options()))
        if not files:
            print(f"kernel_scale.py: {tree} has no C file the default include/exclude admits: nothing to measure",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"tree: {tree} ({len(files)} files admitted by the default include/exclude/maxFileBytes)")
        if "splitter" in only:
            splitter(tree, files, args.list_misses)
        if "tools" in only:
            tools(tree, 1, QUICK_SYMBOLS) if args.quick else tools(tree, ROUNDS)
        if "server" in only:
            asyncio.run(server(tree, files[0], Path(scratch)))
    return 0


def machine() -> None:
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores; "
        f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def quick_tree(root: Path) -> Path:
    """A small tree: the demo corpus, the real C files of bench/corpus, and the kernel idioms of the tests
    (tests/support/kernel_idioms.py), one file each."""
    tree = root / "tree"
    shutil.copytree(REPO / "examples", tree / "examples", ignore=shutil.ignore_patterns("traces"))
    shutil.copytree(REPO / "bench" / "corpus", tree / "corpus")
    (tree / "kernel").mkdir()
    for case in kernel_idioms.CASES:
        (tree / "kernel" / f"{case.name}{case.suffix}").write_text(case.source)
    return tree


# --- the splitter ---------------------------------------------------------------------------------------------


def splitter(tree: Path, files: list[Path], list_misses: int) -> None:
    """Split every file; measure coverage of ctags' function extents, names, and time."""
    datas = [path.read_bytes() for path in files]
    load = os.getloadavg()[0]
    split, split_wall, split_cpu, own_cpu = split_all(datas)
    with multiprocessing.Pool(splitting.WORKERS) as pool:
        t0 = time.perf_counter()
        parsed = pool.map(bare_parse, datas, chunksize=16)
        parse_wall = time.perf_counter() - t0
    results = [
        FileResult(path, len(data), parse_s, found, cpp)
        for path, data, found, (parse_s, cpp) in zip(files, datas, split, parsed, strict=True)
    ]
    total_parse = sum(r.parse_s for r in results)
    print(
        f"split: {len(results)} files, {sum(r.size for r in results) / 1e6:.1f} MB, "
        f"{sum(len(r.split) for r in results)} units in {split_wall:.1f} s wall, {split_cpu:.1f} s CPU in "
        f"{splitting.WORKERS} splitter processes + {own_cpu:.1f} s here (load {load:.1f} at the start) "
        f"(tree-sitter's bare parse of the same bytes: {total_parse:.1f} s CPU, {parse_wall:.1f} s wall); "
        f"{sum(r.cpp for r in results)} files read as C++, "
        f"{sum(bool(units.fallback_note(r.split)) for r in results)} in line windows"
    )
    made = [u for r in results for u in r.split if u.kind == templates.KIND]
    held = sum(len(merged(u.name)) for u in made)
    print(f"macro templates: {len(made)} units holding {held} functions written in a #define")
    largest = max(results, key=lambda r: r.size, default=None)
    if largest is not None:
        split_s, parse_s, _ = timed(datas[results.index(largest)])
        print(
            f"largest file: {largest.path.relative_to(tree)} ({largest.size / 1e6:.2f} MB): split in "
            f"{split_s * 1000:.0f} ms, bare parse {parse_s * 1000:.0f} ms"
        )
    if total_parse:
        print(f"ratio split_over_parse = {split_cpu / total_parse:.2f}")
    megabyte()
    ctags = shutil.which("ctags")
    if ctags is None or b"Universal Ctags" not in subprocess.run([ctags, "--version"], capture_output=True).stdout:
        print("universal-ctags not found (apt-get install universal-ctags): no coverage figures")
        return
    read_tags(ctags, tree, results)
    coverage(ctags, tree, results, list_misses)


def megabyte() -> None:
    """A generated 1 MB kernel file (300 includes, thousands of functions full of kernel idioms): the shape
    that once took the splitter 86 s, because every unit walked every include."""
    functions = "\n".join(case.source for case in kernel_idioms.CASES if case.suffix == ".c")
    data = "".join(f"#include <linux/k3_{i}.h>\n" for i in range(300))
    copies = 0
    while len(data) < 1_000_000:
        data += re.sub(r"\b(k3_\w+)\(", rf"\1_{copies}(", functions)
        copies += 1
    best = min(timed(data) for _ in range(3))
    split_s, parse_s, n = best
    print(
        f"1 MB file ({len(data) / 1e6:.2f} MB, {n} units): split in {split_s * 1000:.0f} ms, bare parse "
        f"{parse_s * 1000:.0f} ms (best of 3)"
    )
    print(f"ratio split_1mb_over_parse = {split_s / parse_s:.2f}")


def timed(source: str | bytes) -> tuple[float, float, int]:
    data = source.encode() if isinstance(source, str) else source
    t0 = time.process_time()
    n = len(units.parse(data).units)
    t1 = time.process_time()
    Parser(units.C_LANGUAGE).parse(data)
    return t1 - t0, time.process_time() - t1, n


def split_all(datas: list[bytes]) -> tuple[list[tuple[units.Unit, ...]], float, float, float]:
    """Every file's units from the language server's splitter, a few files in flight per worker: (units, wall s,
    the workers' CPU s, this process's CPU s). CPU time, as well as wall: other work shares the cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = time.process_time()
    t0 = time.perf_counter()

    async def run() -> list[tuple[units.Unit, ...]]:
        splitter = splitting.Splitter()
        gate = asyncio.Semaphore(2 * splitting.WORKERS)

        async def one(data: bytes) -> tuple[units.Unit, ...]:
            async with gate:
                return await splitter.split(data, kernelc.DEFAULT_MACROS)

        try:
            return await asyncio.gather(*(one(data) for data in datas))
        finally:
            splitter.close(wait=True)  # exited: their CPU time is counted as this process's children's

    split = asyncio.run(run())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return split, wall, cpu, time.process_time() - own


def bare_parse(data: bytes) -> tuple[float, bool]:
    """tree-sitter's parse of a file's bytes as they are, in the language k3lsp reads it in: (CPU s, C++)."""
    cpp = kernelc.normalise(data).cpp
    t0 = time.process_time()
    Parser(units.CPP_LANGUAGE if cpp else units.C_LANGUAGE).parse(data)
    return time.process_time() - t0, cpp


def read_tags(ctags: str, tree: Path, results: list[FileResult]) -> None:
    """Every function definition ctags finds, per file, each file read in the language k3lsp reads it in."""
    by_path = {str(r.path.relative_to(tree)): r for r in results}
    for language in ("C", "C++"):
        names = [p for p, r in by_path.items() if r.cpp == (language == "C++")]
        for tag in run_ctags(ctags, tree, language, names):
            if tag["path"] in by_path:
                by_path[tag["path"]].tags.append(Tag(tag["name"], tag["line"], tag.get("end", 0)))


def run_ctags(ctags: str, cwd: Path, language: str, names: list[str]) -> Iterator[dict]:
    """The function tags ctags finds in the files `names` (relative to cwd), read as `language`."""
    if not names:
        return
    out = subprocess.run(
        [ctags, f"--language-force={language}", "--output-format=json", "--fields=+ne", "--kinds-C=f", *TAIL],
        input="\n".join(names),
        capture_output=True,
        text=True,
        cwd=cwd,
        check=True,
    )
    for line in out.stdout.splitlines():
        tag = json.loads(line)
        if tag.get("_type") == "tag" and tag.get("kind") == "function":
            yield tag


def macro_like(name: str, table: kernelc.Macros) -> bool:
    """A name ctags gives a function that is not one: an upper-case macro, an attribute or statement macro
    of k3lsp's table, a C11 keyword (`_Atomic(T) *f(...)`, `_Alignas(8) char x[];` above a function)."""
    return bool(MACRO.match(name)) or name in C11_KEYWORDS or table.kind_of(name) in ("attributes", "statements")


def excluded(tag: Tag, tags: list[Tag], lines: list[bytes]) -> str | None:
    """Why a ctags tag is not a function to hold the splitter to, or None: ctags' own mislabels."""
    if tag.end < tag.line:
        return "ctags gave no end line"
    if any(o is not tag and o.line < tag.line <= o.end for o in tags):
        return "inside another function's extent (a macro call ctags took for a definition)"
    if b"{" not in b"\n".join(lines[tag.line - 1 : tag.end]):
        return "no body: a prototype or a macro call ctags took for a definition"
    return None


def coverage(ctags: str, tree: Path, results: list[FileResult], list_misses: int) -> None:
    """`function_lines_covered` and `units_named_after_non_functions` against ctags (see the docstring)."""
    table = kernelc.DEFAULT_MACROS
    inside = covered = 0
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    misses: list[tuple[int, str]] = []
    misnamed: list[str] = []
    swallowed: list[str] = []  # units holding more functions than their name says (one swallowed the next)
    unseen: list[tuple[units.Unit, bool, str]] = []  # units where ctags sees no function

    def exclude(why: str, n: int, where: str) -> None:
        reasons[why] += n
        examples.setdefault(why, []).append(where)

    for r in results:
        lines = r.path.read_bytes().split(b"\n")
        owner: list[units.Unit | None] = [None] * (len(lines) + 1)  # 0-based line -> its unit
        for u in r.split:
            for line in range(u.start_line, u.end_line + 1):
                owner[line] = u
        rel = r.path.relative_to(tree)
        made = {templates.macro_name(u.text.encode()) for u in r.split if u.kind == templates.KIND}
        for tag in [t for t in r.tags if t.name in made]:
            exclude(MACRO_CALL, tag.end - tag.line + 1 if tag.end >= tag.line else 0, f"{rel}:{tag.line} {tag.name}")
        tags = [t for t in r.tags if t.name not in made]
        called = {t.name for t in tags if call_line(t, lines)}
        for tag in tags:
            where = f"{rel}:{tag.line} {tag.name}"
            why = excluded(tag, tags, lines)
            if why is not None:
                exclude(why, tag.end - tag.line + 1 if tag.end >= tag.line else 0, where)
                continue
            first = tag.line - 1
            last_owner = owner[tag.end - 1]
            above = macro_like(tag.name, table) or tag.name in called
            if above and last_owner is not None and last_owner.start_line > first:
                exclude(BEGAN_ABOVE, last_owner.start_line - first, where)
                first = last_owner.start_line
            span = range(first, tag.end)
            inside += len(span)
            hit = sum(owner[line] is not None for line in span)
            covered += hit
            if hit < len(span):
                misses.append((len(span) - hit, f"{rel}:{tag.line}-{tag.end} {tag.name}: {len(span) - hit} lines"))
        for u in r.split:
            if u.kind == units.WINDOW_KIND:
                continue
            over = [t.name for t in tags if t.line - 1 <= u.end_line and t.end - 1 >= u.start_line]
            where = f"{rel}:{u.start_line + 1} unit {u.name!r} over ctags {over or 'nothing'}"
            parts = [part.rsplit("::", 1)[-1] for part in merged(u.name)]
            whole = [t for t in tags if u.start_line <= t.line - 1 <= t.end - 1 <= u.end_line]
            if len([t for t in whole if table.kind_of(t.name) != "loops"]) > len(parts):
                swallowed.append(f"{where}: {len(whole)} functions in one unit")
            if any(bad(u, part, table) for part in parts):
                misnamed.append(where)
            elif not over:
                unseen.append((u, r.cpp, where))
            elif named_after(u.name, over):
                continue
            elif all(ctags_mislabel(u, f, parts, table) or f in called for f in over):
                exclude(NAMED_AFTER_MACRO, 0, where)
            else:
                misnamed.append(where)
    confirmed = confirm(ctags, unseen)
    print(f"ctags functions: {sum(len(r.tags) for r in results)}; lines inside them: {inside}; covered: {covered}")
    for why, n in reasons.most_common():
        print(f"  excluded: {n} lines, {why} ({len(examples[why])}); e.g. {', '.join(examples[why][:3])}")
    for _, text in sorted(misses, reverse=True)[:list_misses]:
        print(f"  uncovered: {text}")
    for text in misnamed[:list_misses]:
        print(f"  misnamed: {text}")
    kinds = Counter(u.kind for u, _, _ in unseen)
    print(
        f"units where ctags sees no function: {len(unseen)} ({', '.join(f'{n} {k}' for k, n in kinds.items())}); "
        f"{sum(confirmed)} of them are a function of that name when ctags reads the unit's text alone; e.g. "
        + ", ".join([where for (_, _, where), ok in zip(unseen, confirmed, strict=True) if not ok][:5])
    )
    print(f"ratio function_lines_covered = {covered / inside if inside else 1.0:.6f}")
    print(f"units_named_after_non_functions = {len(misnamed)}")
    for text in swallowed[:list_misses]:
        print(f"  swallowed: {text}")
    print(f"units_over_several_functions = {len(swallowed)}")


NAMED_AFTER_MACRO = (
    "no lines: units that ctags names after a word of the return type, or after a loop macro in the body"
)
MACRO_CALL = "an expansion of a macro template of the file, which ctags took for a definition (show_in_reg(in))"
BEGAN_ABOVE = (
    "lines above the function's header where ctags began it, at a macro, keyword or call without its ';' it "
    "named it after"
)


def call_line(tag: Tag, lines: list[bytes]) -> bool:
    """Whether ctags' tag is at a line that only calls its name, its `;` left out (`subsys_initcall(oom_init)`
    above `static void mark_oom_victim(...)`): ctags began the next function there and named it after the call."""
    text = lines[tag.line - 1].strip()
    return text.startswith(tag.name.encode() + b"(") and text.endswith(b")")


def ctags_mislabel(unit: units.Unit, tag: str, parts: list[str], table: kernelc.Macros) -> bool:
    """Whether ctags named the function under a unit after something that is not its name: a word of the
    header before the unit's name (`_Atomic(T) *f(...)`, `os_ref_count_t (f)(...)`), or a loop macro of the
    table used in the body (`zpercpu_foreach_cpu(cpu) {`)."""
    text = unit.text.replace(" (", "(")
    body = text.find("{")
    if table.kind_of(tag) == "loops" and text.find(f"{tag}(", body) > body:
        return True
    head = text[:body]
    if tag not in head:  # the extent began above the unit, at the macro ctags named it after
        return macro_like(tag, table)
    names = [head.find(f"{p}(") for p in parts] + [head.find(f"({p})(") for p in parts]
    return 0 <= head.find(tag) < min((n for n in names if n >= 0), default=-1)


def merged(name: str) -> list[str]:
    """The names in a unit's name: "a+b" for two functions on one line (not the `+` of `operator++`)."""
    return re.split(r"(?<=[\w)])\+(?=[A-Za-z_~])", name)


def named_after(name: str, functions: list[str]) -> bool:
    """Whether a unit is named after a function ctags sees under it: any part of a merged "a+b", a C++ name's
    last component (ctags writes `operator ==`), `sys_read` for `SYSCALL_DEFINE3`, `MACRO(x)` for `MACRO`."""
    plain = {f.replace(" ", "") for f in functions}
    for part in merged(name.replace(" ", "")):
        if part.rsplit("::", 1)[-1] in plain or part.split("(", 1)[0] in plain:
            continue
        if not (part.startswith(("sys_", "compat_sys_")) and any(SYSCALL.match(f) for f in functions)):
            return False
    return True


def confirm(ctags: str, unseen: list[tuple[units.Unit, bool, str]]) -> list[bool]:
    """For each unit where ctags sees no function in the whole file: whether ctags, given the unit's text
    alone, sees a function of the unit's name in it."""
    found: list[set[str]] = [set() for _ in unseen]
    with tempfile.TemporaryDirectory() as scratch:
        for language, suffix in (("C", ".c"), ("C++", ".cpp")):
            names = []
            for i, (u, cpp, _) in enumerate(unseen):
                if cpp == (suffix == ".cpp"):
                    (Path(scratch) / f"u{i}{suffix}").write_text(u.text + "\n")
                    names.append(f"u{i}{suffix}")
            for tag in run_ctags(ctags, Path(scratch), language, names):
                found[int(tag["path"][1:].split(".")[0])].add(tag["name"])
    return [named_after(u.name, sorted(f)) for (u, _, _), f in zip(unseen, found, strict=True)]


def bad(unit: units.Unit, name: str, table: kernelc.Macros) -> bool:
    """A keyword, or a loop macro the unit starts with (a loop cut out of its function: `for_each_cpu(c) {`
    with no return type before it; a function named like a loop macro has one)."""
    head = unit.text.lstrip().replace(" (", "(")
    return name in KEYWORDS or (table.kind_of(name) == "loops" and head.startswith(f"{name}("))


# --- the workspace tools -----------------------------------------------------------------------------------


def ctags_definitions(tree: Path) -> tuple[dict[str, set[tuple[str, int]]], float]:
    """universal-ctags on the whole tree, on its own (no k3lsp listing): each symbol's definition places, and
    how long it took."""
    started = time.monotonic()
    command = ["ctags", "--options=NONE", "-R", "-f", "-", "--output-format=json", "--languages=C,C++"]
    command += ["--kinds-C=+px-m", "--kinds-C++=+px-m", "--fields=+nK-P", "."]
    out = subprocess.run(command, cwd=tree, capture_output=True, check=True).stdout
    seconds = time.monotonic() - started
    places: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for line in out.split(b"\n"):
        try:
            tag = json.loads(line)
        except ValueError:
            continue
        if tag.get("kind") in symbols.DEFINITIONS:
            places[tag["name"]].add((tag["path"].removeprefix("./"), tag["line"]))
    return places, seconds


def median_time(call, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        started = time.monotonic()
        result = call()
        times.append(time.monotonic() - started)
    return statistics.median(times), result


def cpu(who: int) -> float:
    """User and system CPU seconds of this process or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tools(tree: Path, rounds: int, wanted: tuple[str, ...] = SYMBOLS) -> None:
    """The workspace tools section."""
    print(f"== workspace tools on {tree}")
    truth, ctags_seconds = ctags_definitions(tree)
    print(f"universal-ctags alone on the whole tree: {ctags_seconds:.1f} s")
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["K3LSP_CACHE_DIR"] = cache_dir
        index = symbols.index_for(tree)
        started, own, children = time.monotonic(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
        status = asyncio.run(index.ready())
        build = time.monotonic() - started
        own, children = cpu(resource.RUSAGE_SELF) - own, cpu(resource.RUSAGE_CHILDREN) - children
        size = sum(p.stat().st_size for p in index.path.parent.glob(index.path.name + "*"))
        source = sum(p.stat().st_size for p in options.admitted_files(tree, tree, options.Options()))
        print(
            f"index build: {build:.1f} s wall, CPU {children:.1f} s in its child processes and {own:.1f} s in this "
            f"one (the server's share), for {status.files:,} files ({status.indexer}); load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        print(f"index size: {size / 2**20:.1f} MiB for {source / 2**20:.1f} MiB of C and C++ source")
        print(f"ratio index_size_over_source = {size / source:.3f}")
        print(f"ratio index_build_vs_ctags = {build / ctags_seconds:.2f}")
        children = cpu(resource.RUSAGE_CHILDREN)
        refresh, _ = median_time(lambda: (index.refresh(force=True), index.wait(None)), rounds)
        children = (cpu(resource.RUSAGE_CHILDREN) - children) / rounds
        print(f"index refresh of the whole tree, nothing changed: {refresh:.2f} s, CPU {children:.2f} s in its child")
        checked = [s for s in wanted if truth.get(s)]
        if not checked:  # no figure to give: each is a share or a median over the symbols found
            print(f"no symbols found: none of the {len(wanted)} looked up is defined in this tree (per ctags)")
            index.close()
            return
        print(
            f"symbols not defined in this tree (per ctags), left out: {', '.join(sorted(set(wanted) - set(checked)))}"
        )
        found, times = [], defaultdict(list)
        for symbol in checked:
            for tool, args in (
                ("find_definition", {"symbol": symbol}),
                ("find_references", {"symbol": symbol}),
                ("grep", {"pattern": rf"\b{symbol}\b"}),  # a whole word: from the occurrence index
                ("grep", {"pattern": rf"{symbol}\s*\("}),  # a regex: ripgrep
            ):
                seconds, (ok, text) = median_time(lambda t=tool, a=args: sandbox.run_tool(tree, t, a), rounds)
                label = f"{tool} {'word' if args.get('pattern', '').startswith(chr(92) + 'b') else 'regex'}"
                times[label if tool == "grep" else tool].append(seconds)
                if tool == "find_definition":
                    found.append(ok and _first_place(text) in truth[symbol])
                    print(f"  {symbol}: {'found' if found[-1] else 'NOT found'}: {text.split(chr(10))[1][:100]}")
                else:
                    print(f"  {tool} {args}: {text.split(chr(10))[0][:300]}")
            seconds, _ = median_time(
                lambda s=symbol: search.search(tree, s, None, seconds=60, kill_after=60, word=True, sources=True),
                rounds,
            )
            times["ripgrep word search (find_references without the index)"].append(seconds)
        print(f"ratio find_definition_found = {sum(found) / len(found):.3f} ({sum(found)} of {len(found)})")
        for tool, values in times.items():
            print(f"{tool}: p50 {percentile(values, 0.5) * 1000:.0f} ms, p90 {percentile(values, 0.9) * 1000:.0f} ms")
        print(f"load average after the tool calls: {os.getloadavg()[0]:.1f}")
        rg = search.ripgrep()
        if rg is not None:
            bare = [
                median_time(
                    lambda s=s: subprocess.run([rg, "-n", "-e", rf"{s}\s*\("], cwd=tree, capture_output=True), rounds
                )[0]
                for s in checked
            ]
            ratio = statistics.median(times["grep regex"]) / statistics.median(bare)
            print(f"bare ripgrep: p50 {percentile(bare, 0.5) * 1000:.0f} ms; ratio grep_vs_bare_ripgrep = {ratio:.2f}")
        noticed(tree, index, rounds)  # last: it ends the notices
        index.close()


def noticed(tree: Path, index: symbols.SymbolIndex, rounds: int) -> None:
    """A file added at the tree's root and removed again, ``rounds`` times, brought into the index by the change
    notices: the time from the write to a lookup that sees it (the notices' QUIET included) and the refresh's CPU
    in its child; then the same with the notices ended, each change followed by a whole refresh (what a lookup
    started before: the peer). The file, named after this process, is removed whatever happens."""
    if not index.watched():
        print(f"the tree is not watched: every refresh lists it whole ({index.status().describe()})")
        return
    index.refresh()  # a lookup, nothing noticed since the last refresh
    print(f"a lookup with nothing noticed starts a refresh: {'yes' if index.status().building else 'no'}")
    notices = _changes(tree, index, rounds, lambda: None)
    listed = index.status().refreshed
    index.unwatch()
    whole = _changes(tree, index, rounds, lambda: index.refresh(force=True))
    for how, (seen, gone, spent) in (("through the change notices", notices), ("by a whole refresh", whole)):
        print(
            f"a file added, seen {how}: p50 {seen * 1000:.0f} ms; removed: p50 {gone * 1000:.0f} ms; CPU {spent:.2f} "
            "s a refresh in its child" + (f" (each listed {listed})" if spent is notices[2] else "")
        )
    print(f"ratio notice_refresh_cpu_over_whole = {notices[2] / whole[2]:.2f}")


def _changes(tree: Path, index: symbols.SymbolIndex, rounds: int, after) -> tuple[float, float, float]:
    """p50 seconds from adding a file to a lookup that sees it, the same for removing it, and the CPU of a refresh
    in its child; ``after`` each change (the refresh, when the notices are off)."""
    added, removed, children = [], [], cpu(resource.RUSAGE_CHILDREN)
    for n in range(rounds):
        name = f"k3lsp_bench_notice_{os.getpid()}_{n}"
        path = tree / f"{name}.c"
        try:
            started = time.monotonic()
            path.write_text(f"int {name}(void) {{ return 0; }}\n")
            after()
            added.append(_until(lambda n=name: bool(index.definitions(n)) and not index.status().building) - started)
        finally:
            started = time.monotonic()
            path.unlink(missing_ok=True)
        after()
        removed.append(_until(lambda n=name: not index.definitions(n) and not index.status().building) - started)
    return statistics.median(added), statistics.median(removed), (cpu(resource.RUSAGE_CHILDREN) - children) / rounds / 2


def _until(seen, seconds: float = 30.0) -> float:
    """The monotonic time ``seen()`` first held (polled every 10 ms), or when ``seconds`` ran out."""
    deadline = time.monotonic() + seconds
    while not seen() and time.monotonic() < deadline:
        time.sleep(0.01)
    return time.monotonic()


def _first_place(text: str) -> tuple[str, int] | None:
    """The first `path:line-end (kind)` line of a find_definition answer."""
    for line in text.split("\n")[1:]:
        place, _, kind = line.partition(" (")
        path, _, lines = place.rpartition(":")
        if kind and path and lines.split("-")[0].isdigit():
            return path, int(lines.split("-")[0])
    return None


# --- the language server ---------------------------------------------------------------------------------


async def server(tree: Path, opened: Path, scratch: Path) -> None:
    """The language server on TREE, its daemon the fake of the logic tests (tests/support/fake_daemon.py: no
    model, so the server's own work is what is measured): hovers on an open file, idle and then while a
    workspace audit of the whole tree runs, and that audit's time and refreshes."""
    from lsprotocol import types as lsp

    from tests.support.fake_daemon import FakeScript
    from tests.support.lsp import editor

    print("== the language server")
    fake = FakeScript(scratch / "fake.json")
    fake.write({})
    async with editor(tree, profile="pull", fake=fake, cache_dir=scratch / "lsp-cache") as ed:
        uri = ed.open(opened.relative_to(tree).as_posix())
        hover = lsp.HoverParams(lsp.TextDocumentIdentifier(uri), lsp.Position(0, 0))
        loop = asyncio.get_running_loop()

        async def latency() -> float:
            tic = loop.time()
            await ed.client.text_document_hover_async(hover)
            return loop.time() - tic

        idle = [await latency() for _ in range(200)]
        started = loop.time()
        audit = asyncio.ensure_future(ed.command("k3lsp.auditWorkspace", "all", timeout=24 * 3600))
        busy = []
        while not audit.done():
            busy.append(await latency())
            await asyncio.sleep(0.02)
        seconds, report = loop.time() - started, audit.result()
        refreshes = len(ed.refreshes)
    print(f"workspace audit on the fake daemon: {report['files']:,} files in {seconds:.1f} s; {refreshes} refreshes")
    for name, values in (("idle", idle), ("during it", busy)):
        p50, p99, top = (percentile(values, q) * 1000 for q in (0.5, 0.99, 1.0))
        print(f"hover {name}: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {top:.1f} ms ({len(values)} hovers)")
    print(f"ratio hover_p99_busy_over_idle = {percentile(busy, 0.99) / percentile(idle, 0.99):.2f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
