"""Kernel scale: the editor side on a real kernel tree (XNU, Linux, or any C tree).

    uv run python bench/kernel_scale.py TREE [--quick]

One function per section; each prints its figures and `ratio NAME = X` lines against a peer measured in the
same run. `--quick` runs each timed step once instead of ROUNDS times.

Workspace tools (`tools`): the model's `find_definition`, `find_references` and `grep` (k3lsp.sandbox.run_tool)
on TREE, the symbol index built first in a fresh cache directory (a temporary K3LSP_CACHE_DIR: the user's
cache is not touched).
- `ratio find_definition_found = X`: over SYMBOLS (Linux's and XNU's; those universal-ctags, run on the whole
  tree independently of the index, does not define are left out and listed), the share whose answer's first
  place is a definition (not a prototype) that ctags lists for the symbol. Target on XNU: 1.0.
- index build time and size (the sqlite file), beside universal-ctags alone on the whole tree
  (`ratio index_build_vs_ctags = X`), and a refresh with nothing changed.
- tool call p50/p90 per tool after the index is built (target: p90 <= 1 s on XNU), and `grep` beside bare
  ripgrep on the same patterns (`ratio grep_vs_bare_ripgrep = X`: the sandbox's own work on top of the search).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from k3lsp import sandbox, search, symbols

ROUNDS = 3
# Common kernel symbols: Linux's (issue 23's list) and XNU's. Each counts where ctags defines it in TREE.
SYMBOLS = (
    *("copy_from_user", "sk_buff", "kmalloc", "mutex_lock", "tcp_ack", "container_of", "task_struct"),
    *("vfs_read", "kvm_vcpu_ioctl", "tcp_rcv_established", "kfree", "spin_lock"),
    *("copyin", "vm_map_copyin", "ipc_port_release", "kauth_cred_get", "vnode_put", "m_freem", "ipc_kmsg_send"),
    *("vm_map_enter", "zalloc", "sysctl_handle_int", "ipc_port_t", "mbuf", "IOMalloc"),
)


def machine() -> str:
    return f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}"


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


def timed(call, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        started = time.monotonic()
        result = call()
        times.append(time.monotonic() - started)
    return statistics.median(times), result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tools(tree: Path, rounds: int) -> None:
    """The workspace tools section."""
    print(f"== workspace tools on {tree} ({machine()})")
    truth, ctags_seconds = ctags_definitions(tree)
    print(f"universal-ctags alone on the whole tree: {ctags_seconds:.1f} s")
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["K3LSP_CACHE_DIR"] = cache_dir
        index = symbols.index_for(tree)
        started = time.monotonic()
        status = asyncio.run(index.ready())
        build = time.monotonic() - started
        size = sum(p.stat().st_size for p in index.path.parent.glob(index.path.name + "*"))
        print(f"index build: {build:.1f} s for {status.files:,} files ({status.indexer}); {size / 2**20:.1f} MiB")
        print(f"ratio index_build_vs_ctags = {build / ctags_seconds:.2f}")
        refresh, _ = timed(lambda: (index.refresh(force=True), index.wait(None)), rounds)
        print(f"index refresh with nothing changed: {refresh:.2f} s")
        checked = [s for s in SYMBOLS if truth.get(s)]
        print(
            f"symbols not defined in this tree (per ctags), left out: {', '.join(sorted(set(SYMBOLS) - set(checked)))}"
        )
        found, times = [], defaultdict(list)
        for symbol in checked:
            for tool, args in (
                ("find_definition", {"symbol": symbol}),
                ("find_references", {"symbol": symbol}),
                ("grep", {"pattern": rf"\b{symbol}\b"}),
            ):
                seconds, (ok, text) = timed(lambda t=tool, a=args: sandbox.run_tool(tree, t, a), rounds)
                times[tool].append(seconds)
                if tool == "find_definition":
                    found.append(ok and _first_place(text) in truth[symbol])
                    print(f"  {symbol}: {'found' if found[-1] else 'NOT found'}: {text.split(chr(10))[1][:100]}")
        print(f"ratio find_definition_found = {sum(found) / len(found):.3f} ({sum(found)} of {len(found)})")
        for tool, values in times.items():
            print(f"{tool}: p50 {percentile(values, 0.5) * 1000:.0f} ms, p90 {percentile(values, 0.9) * 1000:.0f} ms")
        rg = search.ripgrep()
        if rg is not None:
            bare = [
                timed(lambda s=s: subprocess.run([rg, "-n", "-e", rf"\b{s}\b"], cwd=tree, capture_output=True), rounds)[
                    0
                ]
                for s in checked
            ]
            ratio = statistics.median(times["grep"]) / statistics.median(bare)
            print(f"bare ripgrep: p50 {percentile(bare, 0.5) * 1000:.0f} ms; ratio grep_vs_bare_ripgrep = {ratio:.2f}")
        index.close()


def _first_place(text: str) -> tuple[str, int] | None:
    """The first `path:line-end (kind)` line of a find_definition answer."""
    for line in text.split("\n")[1:]:
        place, _, kind = line.partition(" (")
        path, _, lines = place.rpartition(":")
        if kind and path and lines.split("-")[0].isdigit():
            return path, int(lines.split("-")[0])
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path, help="a kernel source tree (a checkout or an extracted archive)")
    parser.add_argument("--quick", action="store_true", help="run each timed step once")
    args = parser.parse_args()
    tree = args.tree.resolve()
    if not tree.is_dir():
        sys.exit(f"{tree}: not a directory")
    tools(tree, 1 if args.quick else ROUNDS)


if __name__ == "__main__":
    main()
