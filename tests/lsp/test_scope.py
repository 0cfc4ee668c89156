"""The "changed code" scope in the editor, on the fake daemon (the ``logic`` tier): with ``scope: changed`` a save
sends only the function the work tree changed since the base, and shows only its findings on changed lines; the
status names the base; switching to ``all`` shows the rest (at once what was audited, the other functions at the
next save)."""

from __future__ import annotations

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.review import repos
from tests.support import kimi
from tests.support.lsp import editor

pytestmark = pytest.mark.logic

CHANGED = scripted.DEMO_C.replace("\tmemcpy(m->buf, src, n);\n", "\tmemcpy(m->buf, src, n);\n\tm->buf[n] = 0;\n")
OFF_BY_ONE = kimi.finding(cwe=193, severity="high", title="writes one past buf", start_line=4, end_line=4, trace=[])
ADDED_LINE = repos.line_of(CHANGED, "m->buf[n] = 0;") - 1  # 0-based, as LSP counts


def audited(status: dict) -> list[str]:
    return [c["unit"] for c in status["backend"]["calls"] if c["op"] == "audit"]


async def test_scope_changed_audits_and_shows_only_what_the_work_tree_changed(fake, tmp_path):
    root = scripted.workspace(tmp_path)
    repos.git(root, "init", "-q", "-b", "main")
    repos.git(root, "add", "-A")
    repos.git(root, "commit", "-q", "-m", "base")
    (root / "demo.c").write_text(CHANGED)
    fake.write(
        {
            "units": {
                "copy_msg": {"findings": [scripted.COPY_FINDING, OFF_BY_ONE]},  # the memcpy (unchanged), the new line
                "get_slot": {"findings": [scripted.SLOT_FINDING]},
            }
        }
    )
    settings = {"scope": "changed"}
    async with editor(root, settings=settings, configuration=settings, fake=fake, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("demo.c")
        ed.save(uri)
        (shown,) = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 1)
        status = await ed.status()
        assert audited(status) == ["copy_msg"]  # get_slot is untouched since HEAD: not sent
        assert (shown.code, shown.range.start.line) == ("CWE-193", ADDED_LINE)  # not the memcpy's, on an old line
        assert status["scope"].startswith("changed code since HEAD (") and "no upstream" in status["scope"]

        ed.client.set_configuration({"scope": "all"}, section="k3lsp")
        ed.client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        both = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)  # the memcpy finding, known already
        assert sorted(d.code for d in both) == ["CWE-193", "CWE-787"] and audited(await ed.status()) == ["copy_msg"]
        ed.save(uri)
        every = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 3)  # now get_slot is audited too
        status = await ed.status()
    assert sorted(d.code for d in every) == ["CWE-129", "CWE-193", "CWE-787"]
    assert audited(status) == ["copy_msg", "get_slot"] and status["scope"] == "all code"
