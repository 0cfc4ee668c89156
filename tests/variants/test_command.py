"""`k3lsp variants` as a process without a model: a rule given with --rule (a saved one, edited) is checked like the
model's, so a hostile one runs nothing; a good one is searched with, from a file and line or a JSON or SARIF report's
finding, and its candidates said to be unaudited when no daemon answers; a wrong flag is one sentence. Each exits 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from k3lsp.findings.report import Reported
from k3lsp.wire.protocol import MAX_RULE_CHARS
from tests.kbuild import trees
from tests.support.batch import k3lsp
from tests.variants.tree import B_C, DOUBLE_KFREE, KBUILD, plant, reports
from tests.witnesses.test_adapters import needs


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    needs("coccinelle")
    nobody = tmp_path / "sockets"
    nobody.mkdir(mode=0o700)
    return plant(tmp_path.resolve() / "ws")


def _variants(tree: Path, *args: str):
    endpoint = f"ipc://{tree.parent / 'sockets' / 'nobody.sock'}"
    return k3lsp("variants", *args, "--endpoint", endpoint, cache=tree.parent / "cache", cwd=tree)


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("python", '@r@\nexpression E;\n@@\n* kfree(E);\n\n@script:python@\ne << r.E;\n@@\nopen("{mark}", "w")\n',
         "line 6 of the rule ('@script:python@'): a script (script:python, script:ocaml) runs code"),
        ("ocaml", '@initialize:ocaml@\n@@\nlet _ = open_out "{mark}"\n\n@@\n@@\n* kfree(...);\n',
         "line 1 of the rule ('@initialize:ocaml@'): an @initialize or @finalize rule runs code"),
        ("include", '#include "{canary}"\n@@\n@@\n* kfree(...);\n',
         "line 1 of the rule ('#include"),
    ],
)  # fmt: skip
def test_a_hostile_rule_given_with_rule_runs_nothing_and_reads_nothing_outside(tree, tmp_path, name, text, said):
    mark, canary = tmp_path / "ran", tmp_path / "canary.cocci"
    canary.write_text("@@\n@@\n* kmalloc(...);\n")
    rule = tmp_path / f"{name}.cocci"
    rule.write_text(text.format(mark=mark, canary=canary))
    done = _variants(tree, "drivers/usb/b.c:14", "--rule", str(rule))
    assert done.returncode == 2 and done.stdout.splitlines()[-1].endswith("0 candidates, 0 confirmed, 0 refuted, "
                                                                          "0 untriaged, 0 failed")  # fmt: skip
    assert f"k3lsp variants: error: the rule is refused: {said}" in done.stderr
    assert not mark.exists() and not (tree / ".k3lsp").exists() and "spatch over" not in done.stderr
    assert "kmalloc" not in done.stdout + done.stderr  # the canary's rule was never read


DOUBLE_FREE = Reported("ws/drivers/usb/b.c", "drivers/usb/b.c", 14, 2, 14, 11, "high", 415, "c is freed twice",
                       "kfree(c) again", "b_release", "cd" * 32)  # fmt: skip


@pytest.mark.parametrize("start", ["FILE:LINE", "JSON", "SARIF"])
def test_a_good_rule_is_searched_and_its_candidate_said_unaudited_without_a_daemon(tree, tmp_path, start):
    (tmp_path / "double.cocci").write_text(DOUBLE_KFREE)
    as_json, as_sarif = reports(tree, tmp_path, DOUBLE_FREE)
    given = {"FILE:LINE": ("drivers/usb/b.c:14",), "JSON": ("--from", str(as_json), "--finding", "1"),
             "SARIF": ("--from", str(as_sarif), "--finding", "1")}[start]  # fmt: skip
    done = _variants(tree, *given, "--rule", str(tmp_path / "double.cocci"), "--json")
    assert done.returncode == 2
    body = json.loads(done.stdout)
    assert (body["origin"]["path"], body["origin"]["line"]) == ("drivers/usb/b.c", 14)
    assert body["spatch"] == {"matches": 2, "searched": 3, "files": 3, "stopped": None, "errors": []}
    (candidate,) = body["candidates"]
    assert (candidate["path"], candidate["line"], candidate["unit"], candidate["verdict"]) == (
        "fs/c.c",
        8,
        "c_drop",
        "failed",
    )
    assert "is not reachable" in candidate["reason"] and body["stats"]["failed"] == 1
    assert "1 candidates not audited" in done.stderr
    assert Path(body["rule"]).read_text().endswith(DOUBLE_KFREE)


LONGEST = DOUBLE_KFREE + "// a long rule\n" * ((MAX_RULE_CHARS - len(DOUBLE_KFREE)) // 15)  # at the bound


@pytest.mark.parametrize(
    ("rel", "rule"),
    [("tools/perf/builtin-script.c", DOUBLE_KFREE), ("drivers/usb/b2.c", LONGEST)],
    ids=["name", "long"],
)
def test_the_saved_rule_reruns_as_it_was(tree, tmp_path, rel, rule):
    """The saved rule says in a comment which finding it came from; given back with --rule it is checked again,
    so neither a file such as tools/perf/builtin-script.c (a word the checks refuse) nor the comment's length on a
    rule at the bound may make it one the checks refuse."""
    (tree / rel).parent.mkdir(parents=True, exist_ok=True)
    (tree / rel).write_text(B_C)
    (tmp_path / "double.cocci").write_text(rule)
    first = json.loads(_variants(tree, f"{rel}:14", "--rule", str(tmp_path / "double.cocci"), "--json").stdout)
    saved = first["rule"]
    assert saved is not None and Path(saved).read_text().endswith(rule)
    again = _variants(tree, f"{rel}:14", "--rule", saved, "--json")
    assert "refused" not in again.stderr, again.stderr
    body = json.loads(again.stdout)
    assert body["spatch"] == first["spatch"] and body["candidates"] == first["candidates"] != []


def test_wrong_flags_are_each_one_sentence(tree):
    done = _variants(tree, "drivers/usb/b.c:14", "--from", "r.json", "--retries", "-1", "--max-files", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "k3lsp variants: error: give either FILE:LINE or --from REPORT (with --finding N); --retries -1 is not 0 "
        "to 7 (a rule request carries 8 tries); --max-files 0 is too small: give 1 or more\n"
    )
    done = _variants(tree, "drivers/usb/b.c:99")
    assert done.returncode == 2 and done.stderr == "k3lsp variants: error: drivers/usb/b.c:99: the file has 16 lines\n"


def test_a_rule_that_cannot_be_saved_is_said_and_the_search_goes_on(tree, tmp_path):
    (tmp_path / "double.cocci").write_text(DOUBLE_KFREE)
    (tree / ".k3lsp").write_text("not a folder")
    done = _variants(tree, "drivers/usb/b.c:14", "--rule", str(tmp_path / "double.cocci"), "--json")
    body = json.loads(done.stdout)
    assert body["rule"] is None and body["rule_text"] == DOUBLE_KFREE and body["spatch"]["matches"] == 2
    assert f"the rule could not be saved in {tree / '.k3lsp/variants'}" in done.stderr


def test_a_link_the_repository_put_where_the_rule_is_saved_writes_nothing_outside(tree, tmp_path):
    """A cloned tree may hold .k3lsp/variants/<fingerprint>.cocci as a link to a file of the user's (~/.bashrc), or
    .k3lsp as a link to a folder outside: the rule is written over neither, nor anywhere outside the workspace."""
    (tmp_path / "double.cocci").write_text(DOUBLE_KFREE)
    search = ("drivers/usb/b.c:14", "--rule", str(tmp_path / "double.cocci"), "--json")
    saved = Path(json.loads(_variants(tree, *search).stdout)["rule"])
    victim = tmp_path / "bashrc"
    victim.write_text("alias ls='ls -F'\n")
    saved.unlink()
    saved.symlink_to(victim)
    body = json.loads(_variants(tree, *search).stdout)
    assert victim.read_text() == "alias ls='ls -F'\n"
    assert body["rule"] == str(saved) and not saved.is_symlink() and saved.read_text().endswith(DOUBLE_KFREE)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(tree / ".k3lsp")
    (tree / ".k3lsp").symlink_to(outside)
    done = _variants(tree, *search)
    body = json.loads(done.stdout)
    assert list(outside.iterdir()) == [] and body["rule"] is None and body["spatch"]["matches"] == 2
    assert f"the rule could not be saved in {tree / '.k3lsp/variants'}: it leads outside the workspace" in done.stderr


def test_the_bounds_given_as_flags_stop_the_workspace_search_and_are_said(tree, tmp_path):
    (tmp_path / "double.cocci").write_text(DOUBLE_KFREE)
    rule = ("--rule", str(tmp_path / "double.cocci"))
    timed = _variants(tree, "drivers/usb/b.c:14", *rule, "--max-seconds", "0.01")  # the finding's own file first
    assert timed.returncode == 0, timed.stderr  # the rule matched its finding; the search found nothing in time
    assert "spatch: 0 matched lines in 0 of 3 C files; stopped at the time bound: 0.01 s, 0 of 3 files" in timed.stdout
    capped = _variants(tree, "drivers/usb/b.c:14", *rule, "--max-matches", "1", "--json")
    assert json.loads(capped.stdout)["spatch"]["stopped"] == "the match bound: 1 matches, 3 of 3 files"


def test_only_built_searches_only_the_files_the_configuration_builds(tree, tmp_path):
    """Issue 43: the search runs over the files the user's kernel builds once Kconfig reachability exists. With
    --only-built the variant planted in fs/c.c, which the .config does not build, is not searched, and the one in
    drivers/net/d.c under an #ifdef it does not set is not sent; with --kconfig alone both are."""
    trees.write(tree, KBUILD)
    (tmp_path / "double.cocci").write_text(DOUBLE_KFREE)
    search = ("drivers/usb/b.c:14", "--rule", str(tmp_path / "double.cocci"), "--json")
    everything = json.loads(_variants(tree, *search, "--kconfig", ".config").stdout)
    assert everything["spatch"]["files"] == 4
    assert sorted(c["path"] for c in everything["candidates"]) == ["drivers/net/d.c", "fs/c.c"], everything
    done = _variants(tree, *search, "--kconfig", ".config", "--only-built")
    body = json.loads(done.stdout)
    assert body["spatch"]["files"] == 3 and body["spatch"]["matches"] == 2 and body["candidates"] == [], body
    assert "spatch over 3 C files (1 not built, skipped: --only-built)" in done.stderr, done.stderr
    assert "1 candidates in code the configuration does not build, skipped (--only-built)" in done.stderr


def test_without_spatch_it_says_so_before_asking_the_model(tree):
    endpoint = f"ipc://{tree.parent / 'sockets' / 'nobody.sock'}"  # the model would not answer: not asked at all
    done = k3lsp("variants", "drivers/usb/b.c:14", "--endpoint", endpoint, cache=tree.parent / "cache", cwd=tree,
                 env={"PATH": str(tree / "no-programs-here")})  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == "k3lsp variants: error: spatch is not installed: apt-get install coccinelle\n"
