"""Workspace audits with include/exclude/maxFileBytes, visible settings errors, and cancelling an audit from the
editor's progress UI (window/workDoneProgress/cancel). Real server, real scripted `k3-backend`."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as lsp

from tests.lsp import scripted
from tests.support.lsp import WAIT, editor


async def test_workspace_audit_honours_include_exclude_and_size_and_publishes_unopened_files(daemon, tmp_path):
    root = scripted.workspace(tmp_path)
    (root / "sub").mkdir()
    (root / "sub" / "extra.c").write_text("static int extra(void)\n{\n\treturn 1;\n}\n")
    (root / "sub" / "extra.h").write_text("int extra_h(void);\n")  # not included below
    (root / "sub" / "latin1.c").write_bytes(b"/* caf\xe9 */\nstatic int cafe(void)\n{\n\treturn 2;\n}\n")  # not UTF-8
    (root / "big.c").write_text("static int big(void)\n{\n" + "\t;\n" * 2000 + "}\n")  # over maxFileBytes
    settings = {
        "endpoint": daemon.endpoint,
        "include": ["**/*.c"],
        "exclude": ["slow.c"],
        "maxFileBytes": 2000,
        "trigger": "sometimes",  # invalid: reported, default kept
        "colour": "blue",  # unknown: reported
    }
    async with editor(root, settings=settings, cache_dir=tmp_path / "c") as ed:

        def errors():
            return [m.message for m in ed.client.messages if m.type == lsp.MessageType.Error]

        await ed.wait_for(lambda: len(errors()) >= 2)
        errors = errors()
        assert any("'trigger'" in e and "'sometimes'" in e for e in errors), errors
        assert any("unknown k3lsp setting 'colour'" in e for e in errors), errors

        summary = await ed.command("k3lsp.auditWorkspace", timeout=120)
        assert summary == {"files": 4}  # demo.c, leaky.c, sub/extra.c, sub/latin1.c (bytes replaced)
        counters = (await ed.status())["counters"]
        assert counters["units"] == 5 and counters["audited"] == 5
        pushed = await ed.wait_diagnostics(ed.uri("demo.c"), lambda ds: len(ds) == 2)  # never opened
        assert sorted(d.code for d in pushed) == ["CWE-129", "CWE-787"]
        begins = [
            v.title
            for vs in ed.client.progress_reports.values()
            for v in vs
            if isinstance(v, lsp.WorkDoneProgressBegin)
        ]
        assert "k3 audit workspace" in begins


@pytest.mark.parametrize("profile", ["neovim", "pull"])
async def test_cancelling_the_progress_cancels_the_backend_request(daemon, tmp_path, profile):
    root = scripted.workspace(tmp_path)
    async with editor(root, profile=profile, settings={"endpoint": daemon.endpoint}, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("slow.c")
        ed.save(uri)
        await ed.wait_for_status(lambda c: c["sent"] == 1)

        def audit_token():
            for token, values in ed.client.progress_reports.items():
                if any(isinstance(v, lsp.WorkDoneProgressBegin) and v.title == "k3 audit slow.c" for v in values):
                    return token
            return None

        token = await ed.wait_for(audit_token)
        begin = ed.client.progress_reports[token][0]
        assert begin.cancellable and begin.message == "0/1"
        ed.client.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=token))
        counters = await ed.wait_for_status(lambda c: c["cancelled"] == 1)
        assert counters["audited"] == 0
        await ed.wait_for(lambda: isinstance(ed.client.progress_reports[token][-1], lsp.WorkDoneProgressEnd))
        status = await ed.status()
        assert status["diagnostics"] == ("pull" if profile == "pull" else "push")  # Neovim 0.11 cannot re-pull
        assert status["state"]["running"] == 0

        async def daemon_idle():  # the daemon frees the request within a scheduling step
            while (await ed.status())["backend"]["open_requests"]:
                await asyncio.sleep(0.1)

        await asyncio.wait_for(daemon_idle(), WAIT)
