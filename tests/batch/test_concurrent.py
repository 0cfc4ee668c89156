"""Many front ends on one real daemon at once (issue 39): 16 `k3lsp audit` processes, concurrent `k3lsp
review` runs and concurrent language-server sessions, all on the same files (examples/*.c) with one shared result
cache. Every run ends, with its results or a clear error.

The daemon is the tiny checkpoint with a budget of a few tokens, so most audits are cut short (reported, never
cached), and a per-client limit of four open requests, far below what the runs ask at once (4 each), so the
daemon answers ``busy`` all the time: before the fix, the fourth ``busy`` of one unit killed its task in the
pool and the run waited for ever (the bound of each process below failed the test).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.review.repos import repository
from tests.support.batch import k3lsp_env
from tests.support.daemon import Wire, audit_fields, serving
from tests.support.lsp import editor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FILES = sorted(p.name for p in EXAMPLES.glob("*.c"))
ARGS = ["--max-tokens", "6", "--max-open-per-client", "4"]
BOUND = 150.0  # seconds one process may take before it counts as hung (a run takes seconds to a minute here)


@pytest.fixture(scope="module")
def crowded(tiny_model):
    """One daemon that takes two requests of a user at a time and answers each in a few tokens."""
    with serving(tiny_model, args=ARGS) as daemon:
        yield daemon


@pytest.fixture
def tree(tmp_path) -> Path:
    """The examples in a git repository (what review runs read): the .c files and the header they include."""
    root = tmp_path / "tree"
    return repository(root, {p.name: p.read_text() for p in EXAMPLES.glob("k3demo*")})


async def ended(*args: str, cache: Path, cwd: Path) -> tuple[int | None, dict | None, str]:
    """`k3lsp ARGS` (exit status, its JSON report, stderr); exit status None when it was still running at BOUND
    (then killed: it hung)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "k3lsp.cli", *args, cwd=cwd, env=k3lsp_env(cache),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), BOUND)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None, None, ""
    return proc.returncode, json.loads(out) if out.strip() else None, err.decode()


def accounted(report: dict) -> bool:
    """Every unit of the report is audited, cached or failed, or an error line says why it is not."""
    s = report["stats"]
    return s["audited"] + s["cached"] + s["failed"] == s["units"] or any("not audited" in e for e in report["errors"])


async def test_concurrent_audits_of_the_same_files_all_end(crowded, tree, tmp_path):
    """16 runs at once, twice the reviews' and the editors': rounds of 8 already hung before the fix (75 of 160
    runs in stress_concurrent.py's 20 rounds), so a second case of 8 proved nothing these do not."""
    cache, runs = tmp_path / "shared-cache", 16
    common = ["--endpoint", crowded.endpoint, "--json", "--thinking-effort", "off"]
    outcomes = await asyncio.gather(
        *(ended("audit", FILES[i % len(FILES)], *common, cache=cache, cwd=tree) for i in range(runs))
    )
    hung = [i for i, (code, _, _) in enumerate(outcomes) if code is None]
    assert not hung, f"{len(hung)} of {runs} runs never ended: {hung}"
    for code, report, err in outcomes:
        assert code in (0, 1, 2) and report is not None, err  # findings, clean, or errors said (cut short)
        assert accounted(report) and not report["stats"]["interrupted"], report


def reviewed(tree: Path) -> Path:
    """The tree with a line added at the top of every block of one file: each of its functions is a changed one
    to review (as many units as one file's audit)."""
    path = tree / "k3demo_session.c"
    path.write_text(path.read_text().replace("{\n", "{\n\t/* reviewed */\n"))
    return tree


async def test_concurrent_reviews_of_the_same_change_all_end(crowded, tree, tmp_path):
    reviewed(tree)
    common = ["review", "--endpoint", crowded.endpoint, "--json", "--thinking-effort", "off"]
    outcomes = await asyncio.gather(*(ended(*common, cache=tmp_path / "shared-cache", cwd=tree) for _ in range(8)))
    hung = [i for i, (code, _, _) in enumerate(outcomes) if code is None]
    assert not hung, f"{len(hung)} of 8 runs never ended: {hung}"
    for code, report, err in outcomes:
        assert code in (0, 1, 2) and report is not None, err
        s = report["stats"]  # every changed unit has its result, or an error says why not
        assert s["units"] > 0 and (s["audited"] + s["cached"] == s["units"] or report["errors"]), report


async def audited_in_an_editor(root: Path, name: str, endpoint: str, cache: Path, start: asyncio.Barrier) -> dict:
    """One language-server session that opens ``name`` and, once every session is up (``start``), audits it
    (k3lsp.auditFile): its report."""
    settings = {"endpoint": endpoint, "thinkingEffort": "off"}
    async with editor(root, settings=settings, cache_dir=cache) as ed:
        uri = ed.open(name)
        await asyncio.wait_for(start.wait(), BOUND)
        return await ed.command("k3lsp.auditFile", uri, timeout=BOUND)


async def test_concurrent_editor_sessions_on_the_same_files_all_end(crowded, tree, tmp_path):
    """Language servers start one by one: they audit at once from a barrier, once every one is up."""
    cache, start = tmp_path / "shared-cache", asyncio.Barrier(8)
    reports = await asyncio.gather(
        *(audited_in_an_editor(tree, FILES[i % len(FILES)], crowded.endpoint, cache, start) for i in range(8))
    )
    for report in reports:  # every unit has its result, or the error says why not
        assert report["done"] == report["units"] > 0 or report["error"], report


async def test_a_pong_lists_the_askers_open_requests_and_no_one_elses(crowded):
    """What lets a client end a request the daemon no longer has (k3lsp/core/client.py): the daemon reads messages in
    order, so a request sent before a ping is listed in its pong until its end has been sent."""
    async with Wire(crowded.endpoint) as mine, Wire(crowded.endpoint) as other:
        await mine.send("audit", "r1", **audit_fields("u"))
        listed = await mine.ask("ping", "p1")
        elsewhere = await other.ask("ping", "p2")
        end = await mine.finish("r1")
        after = await mine.ask("ping", "p3")
    assert listed["open"] == ["r1"] and elsewhere["open"] == [] and after["open"] == []
    assert end[-1]["kind"] in ("done", "error")
