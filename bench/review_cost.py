"""What a review costs against auditing every function of every file a commit touched, on a real history.

For each of the last N commits of a repository that touch C files (merges left out), both ways of looking at the
commit are priced in tokens:

- **review** (``k3lsp review``): the units the commit changed (``k3lsp.review.changed.plan``), each sent with its change
  (the changed lines marked, the function before the commit);
- **whole files** (the peer): every unit of every C file the commit touched, in the post-image.

A root commit (the import of a tree) is left out: it is no patch.

Prefill: each unit's audit request (``k3lsp.core.request.fields_for``) is turned into the daemon's conversation
(``backend.agent.conversation``) and rendered by the model's own renderer (``backend.prompts.render``, the tiny
checkpoint's release-shaped tokenizer; thinking effort ``high``); the daemon's prompt cache is credited as it
works: the system prompt and tools once per commit, a file's shared context once per file, then each unit's own
tail. Generation cannot be measured without the model: both sides are charged the same ``--generated-per-unit``
tokens for every unit they audit (default 1,000). Printed: per commit, then the sums, and
``ratio review_prefill_savings``, ``ratio review_unit_savings`` and ``ratio review_token_savings`` (prefill +
generation, whole files over review). The target for review_token_savings is >= 5.

Run: ``uv run python bench/review_cost.py REPO [-n 50]`` on a local clone (a bare one works; no network), or
``--quick`` on a small history the script builds (tests/bench runs it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TMPDIR", str(REPO / ".cache" / "tmp"))  # the shared mlx JIT cache
Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)

from backend import agent, prompts  # noqa: E402
from backend.dist import load_tokenizer  # noqa: E402
from backend.tiny import make_tiny  # noqa: E402
from k3lsp.core import request, service  # noqa: E402
from k3lsp.core.options import Options  # noqa: E402
from k3lsp.core.run import Target  # noqa: E402
from k3lsp.git import repo as gitrepo  # noqa: E402
from k3lsp.review import changed as review  # noqa: E402
from k3lsp.review import series  # noqa: E402
from k3lsp.units import split as units  # noqa: E402
from k3lsp.wire.protocol import Priority  # noqa: E402

EFFORT = "high"
TARGET = 5.0


class Pricer:
    """Prefill tokens of a set of units, with the daemon's prompt cache (system once, context once per file)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def prefill(self, targets: list[Target]) -> int:
        total, system, files = 0, False, set()
        for target in targets:
            req = request.fields_for(target, Priority.INTERACTIVE, EFFORT, False)
            conv = agent.conversation(self.tokenizer, req, EFFORT)
            rendered = prompts.render(self.tokenizer, conv.messages, conv.tools, EFFORT)
            seg = rendered.segments
            if not system:
                total, system = total + seg[0], True
            if len(seg) > 1 and target.path not in files:
                total += seg[1] - seg[0]
                files.add(target.path)
            total += len(rendered.tokens) - seg[-1]
        return total


def whole_files(patch: series.Patch, options: Options) -> list[Target]:
    """Every unit of every C file the patch touched and left behind."""
    out = []
    for change in patch.files:
        path = change.new_path
        if path is None or change.binary or not options.wants(path):
            continue
        data = patch.after.read(path)
        if data is not None:
            out += [Target(None, path, u) for u in units.split(data.decode("utf-8", "surrogateescape"))]
    return out


def reviewed_units(planned: review.PatchReview) -> list[Target]:
    """What a review of the patch audits: the units its change touched, each with its change (the service's
    pick, ``k3lsp.core.service.changed_units``)."""
    return [
        Target(None, path, unit, changes=change)
        for path, f in planned.files.items()
        for unit, change in service.changed_units(f.source.units, f.source.lines, f.changed, units.split(f.before))
    ]


def measure(root: Path, n: int, generated: int, tokenizer) -> int:
    options = Options()
    repo = gitrepo.Repository(root, options.max_file_bytes)
    pricer = Pricer(tokenizer)
    rows = []
    for c in repo.history("HEAD", n * 4):
        if len(rows) == n:
            break
        if not c.parents:  # the first import of a tree is no patch
            continue
        patch = series.commit(repo, c, options.wants)
        full = whole_files(patch, options)
        if not full:
            continue
        changed = reviewed_units(review.plan(patch, repo.root, options))
        rows.append((c.short, len(changed), pricer.prefill(changed), len(full), pricer.prefill(full)))
        r = rows[-1]
        print(f"{r[0]}: review {r[1]} units {r[2]:,} prefill tokens; whole files {r[3]} units {r[4]:,}", flush=True)
    if not rows:
        print("no commit touching C files", file=sys.stderr)
        return 2
    units_r, pre_r = sum(r[1] for r in rows), sum(r[2] for r in rows)
    units_f, pre_f = sum(r[3] for r in rows), sum(r[4] for r in rows)
    tok_r, tok_f = pre_r + generated * units_r, pre_f + generated * units_f
    per_commit = statistics.median((r[4] + generated * r[3]) / max(1, r[2] + generated * r[1]) for r in rows)
    print(f"commits: {len(rows)} touching C files; generated tokens per audited unit: {generated:,} (both sides)")
    for side, (u, pre, tok) in {"review": (units_r, pre_r, tok_r), "whole files": (units_f, pre_f, tok_f)}.items():
        print(f"{side}: {u:,} units, {pre:,} prefill tokens, {tok:,} tokens in all ({tok / len(rows):,.0f} per commit)")
    print(f"median per-commit savings: {per_commit:.2f}")
    print(f"ratio review_prefill_savings = {pre_f / max(1, pre_r):.2f}")
    print(f"ratio review_unit_savings = {units_f / max(1, units_r):.2f}")
    print(f"ratio review_token_savings = {tok_f / max(1, tok_r):.2f}")
    return 0


def quick_repository(tmp: Path) -> Path:
    """A small history: a file of 20 functions, each of 8 commits changing one of them (a line or two)."""
    root = tmp / "quick"
    root.mkdir()
    body = "{\n\tint s = 0;\n\tfor (int k = 0; k < n; k++)\n\t\ts += t[k] * K;\n\treturn s;\n}\n"
    funcs = [f"static int f{i}(int *t, int n)\n" + body.replace("K", str(i)) for i in range(20)]
    env = os.environ | {
        "GIT_AUTHOR_NAME": "q",
        "GIT_AUTHOR_EMAIL": "q@x",
        "GIT_COMMITTER_NAME": "q",
        "GIT_COMMITTER_EMAIL": "q@x",
    }

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)

    git("init", "-q")
    (root / "lib.c").write_text("#include <stddef.h>\n\n" + "\n".join(funcs))
    git("add", "-A")
    git("commit", "-qm", "base")
    for i in range(8):
        funcs[i * 2] = funcs[i * 2].replace("\treturn s;", f"\tif (s < 0)\n\t\treturn -{i};\n\treturn s;")
        (root / "lib.c").write_text("#include <stddef.h>\n\n" + "\n".join(funcs))
        git("commit", "-qam", f"f{i * 2}: reject negative sums")
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", nargs="?", type=Path, help="a local git clone (bare or not)")
    parser.add_argument("-n", type=int, default=50, help="commits touching C files to price (default 50)")
    parser.add_argument("--generated-per-unit", type=int, default=1000, help="generated tokens charged per unit")
    parser.add_argument("--quick", action="store_true", help="a small history built here")
    args = parser.parse_args()
    if not args.quick and args.repo is None:
        parser.error("give REPO or --quick")
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="k3-review-cost-") as tmp:
        tokenizer = load_tokenizer(str(make_tiny(Path(tmp) / "tiny")), trust_remote_code=True)
        root = quick_repository(Path(tmp)) if args.quick else args.repo
        return measure(root, args.n, args.generated_per_unit, tokenizer)


if __name__ == "__main__":
    sys.exit(main())
