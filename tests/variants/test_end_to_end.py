"""`k3lsp variants` end to end: a real scripted daemon (the tiny checkpoint, its turns forced through the real
engine) writes the Coccinelle rules, the real spatch searches the planted tree in the sandbox, the model triages
each candidate through the normal audit path, and the command prints and counts what it said.

Four searches on one daemon: the missing NULL check after kmalloc (from a JSON report's finding), whose first rule
does not parse and whose second misses the finding's line, each said back to the model before the third matches;
and the double kfree (from FILE:LINE), whose first rule is hostile (an ``@script:python@`` that would write a file)
and is refused before spatch runs it; and the language server's "Find variants" on the kmalloc finding's diagnostic,
whose confirmed variant shows in its file linked to the original; and "Find variants" on the double kfree's with the
kconfig setting and unbuilt: hide, which searches and sends only what the .config builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from tests.kbuild import trees
from tests.support import kimi
from tests.support.batch import k3lsp
from tests.support.daemon import module_daemon
from tests.support.lsp import editor
from tests.variants.tree import DOUBLE_KFREE, KBUILD, UNCHECKED_KMALLOC, plant
from tests.witnesses.test_adapters import needs

UNPARSABLE = "@@\nexpression E\n@@\n* kfree(E);\n"  # the declaration lacks its ';'
MISSES = "@@\nexpression E;\n@@\n* kfree(E);\n"  # parses, but a_open has no kfree
MARKER = Path("/tmp/k3lsp-variants-hostile-ran")  # what the hostile rule's Python would create
HOSTILE = f'@r@\nexpression E;\n@@\n* kfree(E);\n\n@script:python@\ne << r.E;\n@@\nopen("{MARKER}", "w").close()\n'


ORIGINAL = kimi.finding(cwe=476, severity="high", title="p is used before its NULL check", start_line=4, end_line=4,
                        message="kmalloc can return NULL", trace=[{"line": 3, "note": "kmalloc may fail"}])  # fmt: skip
FREED_TWICE = kimi.finding(cwe=415, severity="high", title="c is freed twice", start_line=4, end_line=4,
                           message="kfree(c) again", trace=[{"line": 3, "note": "c is freed"}])  # fmt: skip


def _rule(text: str) -> str:
    return kimi.turn(content=f"The pattern, as a semantic patch:\n```cocci\n{text}```\n")


def _triage(verdict: str, reason: str) -> str:
    return kimi.turn(("triage_alert", {"id": "A1", "verdict": verdict, "reason": reason}))


def script() -> list[dict]:
    rules = [(0, UNPARSABLE), (1, MISSES), (2, UNCHECKED_KMALLOC)]
    out = [{"unit": "a_open", "kind": "rule", "tries": n, "turns": [_rule(r)]} for n, r in rules]
    out += [
        {"unit": "b_release", "kind": "rule", "tries": n, "turns": [_rule(r)]}
        for n, r in ((0, HOSTILE), (1, DOUBLE_KFREE))
    ]
    return [
        *out,
        {"unit": "a_grow", "kind": "audit", "turns": [_triage("confirmed", "q is written before any check")]},
        {"unit": "b_probe", "kind": "audit", "turns": [_triage("refuted", "kmalloc cannot fail in probe here")]},
        {"unit": "c_drop", "kind": "audit", "turns": [_triage("confirmed", "name is freed twice when n > 2")]},
        {"unit": "a_open", "kind": "audit", "turns": [kimi.turn(("report_finding", ORIGINAL))]},
        {"unit": "b_release", "kind": "audit", "turns": [kimi.turn(("report_finding", FREED_TWICE))]},
        {"unit": "*", "kind": "audit", "turns": [kimi.turn()]},  # every other unit: nothing found
    ]  # fmt: skip


daemon = module_daemon(script, ["--max-tokens", "2000"])


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    needs("coccinelle")
    return plant(tmp_path.resolve() / "ws")


def _report(root: Path) -> Path:
    """A `k3lsp audit --json` report whose one finding is a_open's unchecked kmalloc (line 7)."""
    finding = {"path": "ws/drivers/net/a.c", "uri": "drivers/net/a.c", "line": 7, "end_line": 7, "column": 2,
               "end_column": 14, "severity": "high", "cwe": 476, "title": "p is used before its NULL check",
               "message": "kmalloc can return NULL; p->len writes through it", "unit": "a_open",
               "fingerprint": "f" * 64}  # fmt: skip
    path = root.parent / "report.json"
    path.write_text(json.dumps({"root": str(root), "findings": [finding], "errors": [], "warnings": []}))
    return path


def test_the_kmalloc_variants_are_found_triaged_shown_and_counted_after_two_rules_that_failed(daemon, tree):
    report = _report(tree)
    done = k3lsp("variants", "--from", str(report), "--finding", "1", "--endpoint", daemon.endpoint, "--json",
                 cache=tree.parent / "cache", cwd=tree.parent)  # fmt: skip
    assert done.returncode == 1, done.stderr  # variants confirmed
    body = json.loads(done.stdout)
    tries = [t["outcome"] for t in body["tries"]]
    assert len(tries) == 2 and tries[0].startswith("spatch cannot parse the rule:") and "parse error" in tries[0]
    assert tries[1].startswith("the rule did not match line 7 of drivers/net/a.c")
    assert body["stats"] == {"candidates": 2, "confirmed": 1, "refuted": 1, "untriaged": 0, "failed": 0}
    verdicts = {(c["path"], c["line"], c["unit"]): c["verdict"] for c in body["candidates"]}
    assert verdicts == {("drivers/net/a.c", 15, "a_grow"): "confirmed", ("drivers/usb/b.c", 6, "b_probe"): "refuted"}
    (variant,) = body["findings"]
    assert variant["variant_of"] == "f" * 64 and variant["line"] == 15 and variant["unit"] == "a_grow"
    assert [r["unit"] for r in body["refuted"]] == ["b_probe"]
    saved = Path(body["rule"])
    assert saved.parent == tree / ".k3lsp" / "variants" and saved.read_text().endswith(UNCHECKED_KMALLOC)


def test_the_double_kfree_from_a_line_after_a_hostile_rule_that_never_ran(daemon, tree):
    MARKER.unlink(missing_ok=True)
    done = k3lsp("variants", "drivers/usb/b.c:14", "--title", "c is freed twice", "--endpoint", daemon.endpoint,
                 cache=tree.parent / "cache", cwd=tree)  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "variants of drivers/usb/b.c:14: c is freed twice (CWE-710)"
    assert lines[1].startswith("rule 1 refused: refused before spatch ran it: line 6 of the rule")
    assert "script" in lines[1] and not MARKER.exists()
    assert "fs/c.c:8: c_drop: confirmed: name is freed twice when n > 2" in lines
    assert lines[-1] == "k3lsp variants: 1 candidates, 1 confirmed, 0 refuted, 0 untriaged, 0 failed"


async def _find_variants(ed, uri: str, code: str) -> tuple[lsp.Diagnostic, dict]:
    """The file audited, its one finding (``code``) shown, and its "Find variants" code action run: the finding's
    diagnostic and the command's answer."""
    await ed.command("k3lsp.auditFile", uri, timeout=180)
    (shown,) = await ed.wait_diagnostics(uri, lambda ds: [d.code for d in ds] == [code])
    params = lsp.CodeActionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), range=shown.range,
        context=lsp.CodeActionContext(diagnostics=[shown]),
    )  # fmt: skip
    offered = await ed.client.text_document_code_action_async(params)
    (action,) = [a for a in offered if a.title == f"Find variants of this {code} finding in the workspace"]
    return shown, await ed.command(action.command.command, *action.command.arguments, timeout=300)


async def test_find_variants_on_a_diagnostic_shows_the_confirmed_variant_linked_to_the_original(daemon, tree):
    async with editor(tree, settings={"endpoint": daemon.endpoint}, cache_dir=tree.parent / "lsp-cache") as ed:
        uri = ed.open("drivers/net/a.c")
        shown, said = await _find_variants(ed, uri, "CWE-476")
        assert said["confirmed"] == 1 and said["refuted"] == 1 and said["errors"] == [], said
        assert said["rule"] == str(tree / ".k3lsp/variants" / f"{shown.data['fingerprint'][:32]}.cocci")
        shown_now = await ed.wait_diagnostics(uri, lambda ds: len(ds) == 2)
    (variant,) = [d for d in shown_now if d.source == "k3-audit variants"]
    assert variant.range.start.line == 14 and "a variant of drivers/net/a.c:7" in variant.message
    (related,) = variant.related_information
    assert related.location.uri == uri and related.location.range.start.line == 6
    assert variant.data["variant_of"] == shown.data["fingerprint"]


async def test_find_variants_with_unbuilt_hide_searches_and_sends_only_what_the_kconfig_builds(daemon, tree):
    """Issue 43 in the editor: with the kconfig setting and unbuilt: hide, "Find variants" on b_release's double
    kfree has spatch skip fs/c.c, which the .config does not build (its c_drop variant is neither searched nor sent),
    and search the built drivers/net/d.c, whose d_drop matches but is not sent: it is under an #ifdef the .config
    does not set. Without unbuilt: hide, 4 files are searched and both are sent (test_command's --kconfig alone)."""
    trees.write(tree, KBUILD)
    sent_before = {u: len(daemon.sessions(u)) for u in ("c_drop", "d_drop")}
    settings = {"endpoint": daemon.endpoint, "kconfig": ".config", "unbuilt": "hide"}
    async with editor(tree, settings=settings, cache_dir=tree.parent / "lsp-cache") as ed:
        _, said = await _find_variants(ed, ed.open("drivers/usb/b.c"), "CWE-415")
    assert said["spatch"] == {"matches": 2, "searched": 3, "files": 3, "stopped": None, "errors": []}, said
    assert said["candidates"] == said["confirmed"] == said["refuted"] == 0 and said["errors"] == [], said
    assert {u: len(daemon.sessions(u)) for u in ("c_drop", "d_drop")} == sent_before
