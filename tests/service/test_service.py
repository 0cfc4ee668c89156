"""The audit service (``k3lsp.core.service``) on the fake daemon (the real pool above a scripted transport): the
events a front end gets per document and in which order, the units a change set or a line picks, one audit for
a unit two documents share, a failed unit in its file's outcome, and a cancelled job withdrawing its work."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from k3lsp.core.options import Options
from k3lsp.core.pool import Pool
from k3lsp.core.service import (
    AuditService,
    ChangeSet,
    Document,
    FileDone,
    Job,
    LookedUp,
    Prepared,
    Progress,
    UnitDone,
)
from k3lsp.core.splits import SplitStore
from k3lsp.units import split as units
from k3lsp.wire.cache import ResultCache
from k3lsp.wire.protocol import Priority
from tests.kbuild import trees
from tests.support import kimi
from tests.support.fake_daemon import FakeDaemon, FakeScript

SOURCE = "int first(int n)\n{\n\tint a[4];\n\ta[n] = 1;\n\treturn a[0];\n}\n\nint second(void)\n{\n\treturn 2;\n}\n"
FOUND = kimi.finding(start_line=4, end_line=4, trace=[])


@pytest.fixture
def fake(tmp_path) -> FakeScript:
    script = FakeScript(tmp_path / "fake.json")
    script.write(
        {"units": {"first": {"findings": [FOUND], "progress": [{"stage": "prefill", "tokens": 1, "total": 2}]}}}
    )
    return script


@pytest.fixture
async def service(fake, tmp_path):
    pool = Pool(Options(), ResultCache(tmp_path / "cache.sqlite3"), transport=FakeDaemon.factory(fake.path))
    yield AuditService(pool)
    await pool.close()


def audits(fake: FakeScript) -> list[dict]:
    return [c for c in FakeDaemon(fake.path, None).calls if c["op"] == "audit"]


def doc(tmp_path: Path, name: str = "f.c", **kw) -> Document:
    path = tmp_path / name
    path.write_text(SOURCE)
    return Document.of(path, tmp_path, **kw)


async def test_a_document_gets_prepared_then_its_units_then_its_final_and_the_second_audit_is_cached(
    service, fake, tmp_path
):
    d = doc(tmp_path)
    events: list = []
    outcome = await service.audit([d], events.append)
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "Prepared" and kinds[-1] == "FileDone"
    assert kinds.index("LookedUp") < kinds.index("UnitDone")
    prepared = events[0]
    assert [u.name for u in prepared.units] == ["first", "second"] and len(prepared.targets) == 2
    assert any(isinstance(e, Progress) and e.note == "first: prefill 1/2 tokens" for e in events)
    done = {e.result.unit.name: e for e in events if isinstance(e, UnitDone)}
    ((reportable, silenced),) = done["first"].findings
    assert (reportable.range.start.line, reportable.finding.cwe, silenced) == (3, 787, None)
    assert done["second"].findings == ()
    final = outcome.files[d]
    assert (final.units, final.done, final.complete) == (2, 2, True) and events[-1].outcome is final
    assert outcome.summary.audited == 2

    again: list = []
    await service.audit([doc(tmp_path)], again.append)
    assert [e for e in again if isinstance(e, LookedUp)] == [LookedUp(Priority.INTERACTIVE, 2, 0)]
    assert all(e.result.cached for e in again if isinstance(e, UnitDone)) and len(audits(fake)) == 2


async def test_a_line_picks_its_unit_and_a_change_set_picks_the_changed_units_with_their_change(
    service, fake, tmp_path
):
    events: list = []
    await service.audit([doc(tmp_path, units_at=frozenset({9}))], events.append)
    assert [u.unit.name for e in events if isinstance(e, Prepared) for u in e.targets] == ["second"]
    before = SOURCE.replace("\treturn 2;", "\treturn 3;")
    change = ChangeSet(frozenset({4, 10}), before)
    await service.audit([doc(tmp_path, "g.c", change=change)], events.append)
    sent = {c["unit"]: c["changes"] for c in audits(fake) if c["path"] == "g.c"}
    first_before = SOURCE.split("\n\nint second")[0]
    assert sent == {
        "first": {"lines": [4], "preimage": first_before},
        "second": {"lines": [3], "preimage": "int second(void)\n{\n\treturn 3;\n}"},
    }


async def test_a_unit_two_documents_share_is_audited_once_and_told_to_both(service, fake, tmp_path):
    a, b = doc(tmp_path, "a.c"), doc(tmp_path, "a.c")
    events: list = []
    outcome = await service.audit([a, b], events.append)
    assert len(audits(fake)) == 2  # first and second, once each
    assert {e.doc for e in events if isinstance(e, UnitDone)} == {a, b}
    assert sorted(id(e.doc) for e in events if isinstance(e, FileDone)) == sorted([id(a), id(b)])
    assert outcome.files[a].done == outcome.files[b].done == 2


async def test_a_refused_unit_counts_as_done_and_an_unreadable_file_is_final_at_once(service, fake, tmp_path):
    fake.write({"units": {"first": {"refusal": "too long"}}})
    gone = Document.of(tmp_path / "gone.c", tmp_path)
    events: list = []
    outcome = await service.audit([gone, doc(tmp_path)], events.append)
    assert events[0] == FileDone(gone, outcome.files[gone])
    assert outcome.files[gone].error.startswith("cannot read gone.c")
    assert outcome.summary.refused[0].refusal == "too long"
    assert [e.findings for e in events if isinstance(e, UnitDone) and e.result.unit.name == "first"] == [()]
    assert list(outcome.files.values())[1].done == 2


async def test_cancelling_the_job_withdraws_its_units_from_the_daemon(service, fake, tmp_path):
    fake.write({"units": {"first": {"hold": True}}})
    events: list = []
    job = asyncio.ensure_future(service.audit([doc(tmp_path)], events.append, Job(priority=Priority.BACKGROUND)))
    while not any(isinstance(e, UnitDone) for e in events):  # second answers; first holds
        await asyncio.sleep(0.01)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    await asyncio.sleep(0)
    assert service.pool.counters.cancelled == 1 and not any(isinstance(e, FileDone) for e in events)


async def test_units_the_front_end_split_already_are_not_split_again(fake, tmp_path):
    """``k3lsp audit`` splits every file before the run to say what it costs: the service takes those units."""
    asked: list[str] = []

    async def split(text: str, macros) -> tuple:
        asked.append(text)
        return units.split(text, macros)

    pool = Pool(Options(), ResultCache(tmp_path / "cache.sqlite3"), transport=FakeDaemon.factory(fake.path))
    try:
        service = AuditService(pool, split)
        events: list = []
        await service.audit([doc(tmp_path, "a.c", units=units.split(SOURCE)), doc(tmp_path, "b.c")], events.append)
    finally:
        await pool.close()
    assert asked == [SOURCE]  # b.c only
    assert sorted(e.doc.relpath for e in events if isinstance(e, FileDone)) == ["a.c", "b.c"]


async def test_with_a_kconfig_built_units_go_first_and_only_built_leaves_the_others_out(fake, tmp_path):
    """The kconfig setting in the service itself (k3lsp.core.reachability): every unit's state in Prepared and
    UnitDone, the queue ordered built code first, and Job.only_built counting what it leaves out."""
    trees.write(tmp_path, trees.layout("kernel/", "CONFIG_ON=y\n") | {"kernel/Makefile": "obj-y += f.o\n"})
    guarded = "#ifdef CONFIG_OFF\n" + SOURCE.replace("\nint second", "#endif\nint second")
    path = tmp_path / "kernel" / "f.c"
    path.write_text(guarded)
    options = Options(kconfig=".config")
    pool = Pool(options, ResultCache(tmp_path / "cache.sqlite3"), transport=FakeDaemon.factory(fake.path), slots=1)
    try:
        events: list = []
        outcome = await AuditService(pool).audit([Document.of(path, tmp_path)], events.append)
        assert [c["unit"] for c in audits(fake)] == ["second", "first"]  # first, not built, waits for the built
        (prepared,) = [e for e in events if isinstance(e, Prepared)]
        assert [str(s) for s in prepared.states] == [
            "not built: line 1: `#ifdef CONFIG_OFF` (CONFIG_OFF is not set)",
            "built-in",
        ]
        assert {e.result.unit.name: e.state.kind.value for e in events if isinstance(e, UnitDone)} == {
            "first": "not built",
            "second": "built-in",
        }
        assert outcome.skipped is not None and "1 of 2 units not built (audited all the same" in outcome.skipped.said()
        events.clear()
        path.write_text(guarded.replace("return 2", "return 3"))  # second changed: not from the cache
        outcome = await AuditService(pool).audit([Document.of(path, tmp_path)], events.append, Job(only_built=True))
        assert [c["unit"] for c in audits(fake)] == ["second", "first", "second"]
        (prepared,) = [e for e in events if isinstance(e, Prepared)]
        assert [t.unit.name for t in prepared.targets] == ["second"] and [u.name for u in prepared.unbuilt] == ["first"]
        assert "1 of 2 units not built, skipped" in outcome.skipped.said()
    finally:
        await pool.close()


async def test_a_file_with_a_finding_keeps_its_split_whichever_front_end_audited_it(service, tmp_path):
    found, clean = doc(tmp_path), doc(tmp_path, "clean.c")
    clean.path.write_text("int second(void)\n{\n\treturn 2;\n}\n")
    await service.audit([found, clean], lambda event: None)
    kept = SplitStore.beside(service.pool.cache.path)  # what an editor opening it later reads, in its own process
    assert kept.get(SOURCE, Options().kernel_macros) == units.split(SOURCE)
    assert kept.get(clean.path.read_text(), Options().kernel_macros) is None  # nothing to show: not kept
