"""Kernel scale: the editor side on a whole kernel tree (XNU, a Linux checkout, any C tree).

    uv run python bench/kernel_scale.py TREE [--list-misses N]
    uv run python bench/kernel_scale.py --quick        # a small tree the script builds (what tests/bench runs)

TREE is a directory; the files are those a workspace audit visits with the default settings (`include`
`**/*.c`, `**/*.h`, `exclude`, `maxFileBytes`: k3lsp.options). One function per section, called by `main`:

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
  - split time for the whole tree and for its largest file, beside tree-sitter's bare parse of the same
    bytes in the same run (`ratio split_over_parse = X`: what the normalisation, the brace scan and the
    context cost on top of the parse).
- further sections (tools: `find_definition_found`, tool p50/p90, index build; the language server: hover
  p99 during a workspace audit) are functions of the same shape, called by `main` after this one.

Needs universal-ctags on PATH (Debian/Ubuntu: `apt-get install universal-ctags`; macOS: `brew install
universal-ctags`); without it the splitter section prints the split times only and says why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tree_sitter import Parser

from k3lsp import blocks, cxx, kernelc, options, units

REPO = Path(__file__).resolve().parents[1]
# Names a unit must never have (a statement keyword; C++ words a broken header may leave).
KEYWORDS = frozenset(
    "if else for while do switch case return sizeof typeof goto default break continue asm __asm__ struct "
    "union enum typedef static extern inline const volatile".split()
)


@dataclass
class Tag:
    """One function definition as ctags reports it (1-based lines, end inclusive)."""

    name: str
    line: int
    end: int


@dataclass
class FileResult:
    path: Path
    size: int
    split_s: float
    parse_s: float
    split: list[units.Unit]
    cpp: bool
    tags: list[Tag] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", nargs="?", type=Path, help="the tree to measure")
    parser.add_argument("--quick", action="store_true", help="a small tree built by the script")
    parser.add_argument("--list-misses", type=int, default=20, metavar="N", help="list N uncovered functions")
    args = parser.parse_args(argv)
    if args.quick == (args.tree is not None):
        parser.error("give a TREE or --quick")
    machine()
    with tempfile.TemporaryDirectory() as scratch:
        tree = quick_tree(Path(scratch)) if args.quick else args.tree.resolve()
        files = list(options.admitted_files(tree, tree, options.Options(), limit=10**7))
        print(f"tree: {tree} ({len(files)} files admitted by the default include/exclude/maxFileBytes)")
        splitter(tree, files, args.list_misses)
    return 0


def machine() -> None:
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores; "
        f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def quick_tree(root: Path) -> Path:
    """A small tree: the demo corpus, the real C files of bench/corpus, and one file of kernel idioms."""
    tree = root / "tree"
    shutil.copytree(REPO / "examples", tree / "examples", ignore=shutil.ignore_patterns("traces"))
    shutil.copytree(REPO / "bench" / "corpus", tree / "corpus")
    (tree / "kernel" / "idioms.c").parent.mkdir(parents=True)
    (tree / "kernel" / "idioms.c").write_text(KERNEL_IDIOMS)
    return tree


# --- the splitter ---------------------------------------------------------------------------------------------


def splitter(tree: Path, files: list[Path], list_misses: int) -> None:
    """Split every file; measure coverage of ctags' function extents, names, and time."""
    results = [split_one(path) for path in files]
    total_split = sum(r.split_s for r in results)
    total_parse = sum(r.parse_s for r in results)
    largest = max(results, key=lambda r: r.size, default=None)
    print(
        f"split: {len(results)} files, {sum(r.size for r in results) / 1e6:.1f} MB, "
        f"{sum(len(r.split) for r in results)} units in {total_split:.2f} s "
        f"(tree-sitter's bare parse of the same bytes: {total_parse:.2f} s); "
        f"{sum(r.cpp for r in results)} files read as C++, "
        f"{sum(bool(units.fallback_note(r.split)) for r in results)} in line windows"
    )
    if largest is not None:
        print(
            f"largest file: {largest.path.relative_to(tree)} ({largest.size / 1e6:.2f} MB): split in "
            f"{largest.split_s * 1000:.0f} ms, bare parse {largest.parse_s * 1000:.0f} ms"
        )
    if total_parse:
        print(f"ratio split_over_parse = {total_split / total_parse:.2f}")
    ctags = shutil.which("ctags")
    if ctags is None or b"Universal Ctags" not in subprocess.run([ctags, "--version"], capture_output=True).stdout:
        print("universal-ctags not found (apt-get install universal-ctags): no coverage figures")
        return
    read_tags(ctags, tree, results)
    coverage(tree, results, list_misses)


def split_one(path: Path) -> FileResult:
    data = path.read_bytes()
    t0 = time.perf_counter()
    split = units.parse(data).units
    t1 = time.perf_counter()
    cpp = kernelc.normalise(data).cpp
    t2 = time.perf_counter()
    Parser(units.CPP_LANGUAGE if cpp else units.C_LANGUAGE).parse(data)
    t3 = time.perf_counter()
    return FileResult(path, len(data), t1 - t0, t3 - t2, split, cpp)


def read_tags(ctags: str, tree: Path, results: list[FileResult]) -> None:
    """Every function definition ctags finds, per file, each file read in the language k3lsp reads it in."""
    by_path = {str(r.path.relative_to(tree)): r for r in results}
    for language in ("C", "C++"):
        names = [p for p, r in by_path.items() if r.cpp == (language == "C++")]
        if not names:
            continue
        out = subprocess.run(
            [ctags, f"--language-force={language}", "--output-format=json", "--fields=+ne", "--kinds-C=f"]
            + ["--kinds-C++=f", "-L", "-", "-o", "-"],
            input="\n".join(names),
            capture_output=True,
            text=True,
            cwd=tree,
            check=True,
        )
        for line in out.stdout.splitlines():
            tag = json.loads(line)
            if tag.get("_type") == "tag" and tag.get("kind") == "function" and tag["path"] in by_path:
                by_path[tag["path"]].tags.append(Tag(tag["name"], tag["line"], tag.get("end", 0)))


def excluded(tag: Tag, tags: list[Tag], lines: list[bytes]) -> str | None:
    """Why a ctags tag is not a function to hold the splitter to, or None: ctags' own mislabels."""
    if tag.end < tag.line:
        return "ctags gave no end line"
    if any(o is not tag and o.line < tag.line <= o.end for o in tags):
        return "inside another function's extent (a macro call ctags took for a definition)"
    if b"{" not in b"\n".join(lines[tag.line - 1 : tag.end]):
        return "no body: a prototype or a macro call ctags took for a definition"
    return None


def coverage(tree: Path, results: list[FileResult], list_misses: int) -> None:
    inside = covered = 0
    reasons: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    misses: list[tuple[int, str]] = []
    misnamed: list[str] = []
    table = kernelc.DEFAULT_MACROS
    for r in results:
        lines = r.path.read_bytes().split(b"\n")
        owner = [None] * (len(lines) + 1)  # 0-based line -> its unit
        for u in r.split:
            for line in range(u.start_line, u.end_line + 1):
                owner[line] = u
        rel = r.path.relative_to(tree)
        for tag in r.tags:
            why = excluded(tag, r.tags, lines)
            if why is not None:
                reasons[why] += 1
                examples.setdefault(why, []).append(f"{rel}:{tag.line} {tag.name}")
                continue
            span = range(tag.line - 1, tag.end)
            inside += len(span)
            hit = sum(owner[line] is not None for line in span)
            covered += hit
            if hit < len(span):
                misses.append((len(span) - hit, f"{rel}:{tag.line}-{tag.end} {tag.name}: {len(span) - hit} lines"))
        for u in r.split:
            if u.kind == units.WINDOW_KIND:
                continue
            over = [t.name for t in r.tags if t.line - 1 <= u.end_line and t.end - 1 >= u.start_line]
            if not named_after(u.name, over, table):
                misnamed.append(f"{rel}:{u.start_line + 1} unit {u.name!r} over ctags {over or 'nothing'}")
    print(f"ctags functions: {sum(len(r.tags) for r in results)}; lines inside them: {inside}; covered: {covered}")
    for why, n in reasons.most_common():
        print(f"  excluded: {n} tags, {why}; e.g. {', '.join(examples[why][:3])}")
    for _, text in sorted(misses, reverse=True)[:list_misses]:
        print(f"  uncovered: {text}")
    for text in misnamed[:list_misses]:
        print(f"  misnamed: {text}")
    print(f"ratio function_lines_covered = {covered / inside if inside else 1.0:.6f}")
    print(f"units_named_after_non_functions = {len(misnamed)}")


def named_after(name: str, functions: Iterable[str], table: kernelc.Macros) -> bool:
    """Whether a unit's name is one of the functions ctags sees under it (any of a merged "a+b"), allowing
    the kernel's names for macro-defined functions; never a keyword or a loop macro."""
    functions = set(functions)
    for part in name.split("+"):
        short = part.rsplit("::", 1)[-1]
        if short in KEYWORDS or blocks_loop(short, table):
            return False
        if not functions:
            continue
        macro = part.split("(", 1)[0]
        if (
            short in functions
            or macro in functions
            or part.removeprefix("compat_").removeprefix("sys_") in {f for f in functions}
        ):
            continue
        if any(f.startswith(("SYSCALL_DEFINE", "COMPAT_SYSCALL_DEFINE")) for f in functions):
            continue
        return False
    return True


def blocks_loop(name: str, table: kernelc.Macros) -> bool:
    hit = table._rules.lookup(name.encode())
    return hit is not None and hit[0] == "loops"


# A file of kernel idioms for the quick tree (the constructs of tests/lsp/test_units_kernel.py, in one file).
KERNEL_IDIOMS = r"""
#include <linux/uaccess.h>

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

SYSCALL_DEFINE2(k3_init, unsigned int, flags, unsigned int, event_f_flags)
{
#ifdef CONFIG_AUDITSYSCALL
	if (flags & ~(K3_INIT_FLAGS | K3_ENABLE_AUDIT))
#else
	if (flags & ~K3_INIT_FLAGS)
#endif
		return -EINVAL;
	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	return 0;
}

static __printf(3, 4) void k3_log(struct device *dev, int level, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	vprintk(fmt, args);
	va_end(args);
}

static void k3_walk(struct task_struct *g)
{
	struct task_struct *p = g, *t = g;

	do {
		k3_visit(t);
	} while_each_thread(p, t);
	k3_done(g);
}

int k3_open(struct inode *inode,
#ifdef CONFIG_K3_FILE
	    struct file *file,
#endif
	    int flags)
{
	return 0;
}
"""


if __name__ == "__main__":
    sys.exit(main())
