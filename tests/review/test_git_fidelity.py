"""`k3lsp review --patch` audits the code `git am` lands (issue 38, items 1, 2 and 7).

Each test builds a real repository, writes the patch with `git format-patch` (or splices two of its diffs into one
mail, as a hand-made patch may, or writes the mail around it), lets `git am` (or `git apply`) apply it in a scratch
clone (hooks off, no global or system config), and compares the files with the ones the review builds through its
own functions (``mbox.read``, ``series.mails``, ``review.plan``, ``patches.apply``): line breaks other than
``\\n`` stay inside their line, a hunk lands where git puts it, a mail's body is decoded as git decodes it, and a
file named twice in one mail, or in two mails of a series, is patched diff after diff. The hypothesis test does
that for generated files full of every other line separator, where git refuses too. The last tests bound the work
of reading a hostile patch or mail: counted, never timed.
"""

from __future__ import annotations

import base64
import binascii
import os
import quopri
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from k3lsp.core.options import Options
from k3lsp.git import patches
from k3lsp.git import repo as gitrepo
from k3lsp.review import changed as review
from k3lsp.review import mbox, series
from tests.review import repos

OPTIONS = review.review_options(Options())
SEPARATORS = "\f\r\v\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines breaks on each of these; git on none
GIT_HOME = Path(__file__).resolve().parents[2] / ".cache" / "tmp" / "git-fidelity-home"  # no global config


def git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """git as the tests run it: no system or global config, no hooks, the tests' identity."""
    GIT_HOME.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"HOME": str(GIT_HOME), "GIT_CONFIG_NOSYSTEM": "1", "XDG_CONFIG_HOME": str(GIT_HOME)}
    command = ["git", "-C", str(root), "-c", "core.hooksPath=/dev/null", *repos.IDENTITY, *args]
    return subprocess.run(command, capture_output=True, env=env, timeout=60)


def ok(root: Path, *args: str) -> str:
    done = git(root, *args)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode(errors="surrogateescape").strip()


def history(root: Path, commits: list[dict[str, bytes | None]]) -> list[str]:
    """A new repository at ``root`` with one commit per entry (None: delete the file); the commit ids."""
    root.mkdir(parents=True)
    ok(root, "init", "-q", "-b", "main")
    ids = []
    for n, files in enumerate(commits):
        for name, data in files.items():
            if data is None:
                (root / name).unlink()
            else:
                (root / name).write_bytes(data)
        ok(root, "add", "-A")
        ok(root, "commit", "-q", "--allow-empty", "-m", f"step {n}")
        ids.append(ok(root, "rev-parse", "HEAD"))
    return ids


def format_patch(root: Path, spec: str) -> bytes:
    """The mbox of ``spec``'s commits, renames and copies found as `git format-patch -M -C` finds them."""
    done = git(root, "format-patch", "--stdout", "-M", "-C", "--find-copies-harder", spec)
    assert done.returncode == 0, done.stderr
    return done.stdout


def one_mail(box: bytes) -> bytes:
    """The two mails of ``box`` as one: the first mail with the second one's diff after its own (each diff
    names the files it changes once; together, a file they both change is named twice)."""
    first, second = re.split(rb"(?m)^(?=From [0-9a-f]{40} )", box)[1:]
    diff = second[second.index(b"\ndiff --git ") + 1 : second.rindex(b"\n-- \n") + 1]
    end = first.rindex(b"\n-- \n") + 1
    return first[:end] + diff + first[end:]


def encoded(box: bytes, encoding: str) -> bytes:
    """The mails of ``box`` with their bodies in ``encoding`` (8bit: as they are), as a mail client may send them."""
    if encoding == "8bit":
        return box
    out = []
    for one in re.split(rb"(?m)^(?=From [0-9a-f]{40} )", box)[1:]:
        head, body = one.split(b"\n\n", 1)
        data = quopri.encodestring(body) if encoding == "quoted-printable" else base64.encodebytes(body)
        out.append(head + f"\nContent-Transfer-Encoding: {encoding}\n\n".encode() + data)
    return b"".join(out)


def landed(source: Path, base: str, box: Path, scratch: Path) -> list[dict[str, bytes]] | None:
    """The files after each mail of ``box`` as `git am` applies it in a clone of ``source`` at ``base``; None
    when git refuses the series."""
    ok(source.parent, "clone", "-q", "--no-checkout", str(source), str(scratch))
    ok(scratch, "checkout", "-q", "--detach", base)
    if git(scratch, "am", "-q", str(box)).returncode != 0:
        return None
    count = int(ok(scratch, "rev-list", "--count", f"{base}..HEAD"))
    return [files(scratch, f"HEAD~{count - n}") for n in range(1, count + 1)]


def files(root: Path, rev: str) -> dict[str, bytes]:
    names = ok(root, "ls-tree", "-r", "--name-only", "-z", rev).split("\0")
    return {name: git(root, "cat-file", "blob", f"{rev}:{name}").stdout for name in names if name}


def reviewed(source: Path, base: str, box: Path) -> list[series.Patch]:
    """The patches of ``box`` as ``k3lsp review --patch box --base base`` builds them."""
    repo = gitrepo.Repository(source)
    return series.mails(repo.tree(repo.commit(base)), mbox.read(box))


def assert_same(patch: series.Patch, tree: dict[str, bytes]) -> None:
    """What the review audits of ``patch`` is ``tree``, git's: every file it leaves, byte for byte, and the text of
    every file it plans to audit, line for line."""
    assert patch.error is None, patch.error
    touched = {p for f in patch.files for p in (f.old_path, f.new_path) if p is not None}
    for path in touched | set(tree):
        assert patch.after.read(path) == tree.get(path), path
    plan = review.plan(patch, Path("/r"), OPTIONS)
    for path, file in plan.files.items():
        assert file.source.lines == patches.decode(tree[path]).split("\n"), path


def spliced(tmp_path: Path, commits: list[dict[str, bytes | None]]) -> tuple[dict[str, bytes], series.Patch]:
    """The changes of ``commits`` after the first as one mail (:func:`one_mail`): the files `git am` lands, and the
    patch the review reads, shown to be the same."""
    ids = history(tmp_path / "src", commits)
    box = tmp_path / "p.mbx"
    box.write_bytes(one_mail(format_patch(tmp_path / "src", f"{ids[0]}..{ids[2]}")))
    (tree,) = landed(tmp_path / "src", ids[0], box, tmp_path / "am")
    (patch,) = reviewed(tmp_path / "src", ids[0], box)
    assert_same(patch, tree)
    return tree, patch


def test_a_path_git_refuses_is_not_reviewed(tmp_path):
    """A diff creating `../up.c`, `.git/x.c`, `d/./x.c`, `D/.GIT/x.c` or `d//x.c`: `git apply` refuses each; the
    review reviewed the file (outside the tree, or in its git directory) as if it had landed."""
    history(tmp_path / "src", [{"f.c": b"int f;\n"}])
    for path in ("../up.c", ".git/x.c", "d/./x.c", "D/.GIT/x.c", "d//x.c"):
        diff = (
            f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+int x;\n"
        )
        (tmp_path / "d.patch").write_text(diff)
        assert git(tmp_path / "src", "apply", "--index", str(tmp_path / "d.patch")).returncode != 0, path
        (patch,) = reviewed(tmp_path / "src", "HEAD", tmp_path / "d.patch")
        assert patch.error is not None and path in patch.error and "git refuses" in patch.error, path


def test_a_line_with_a_form_feed_in_it_is_reviewed_as_the_one_line_git_applies(tmp_path):
    """The issue's double free: `kfree(r);\\f kfree(r);` is one added line for git (and two calls for the
    compiler); every other separator Python's splitlines breaks on rides along inside lines of the same patch."""
    patched = repos.DRIVER_C.replace(
        "\tr->len = n;\n", "\tr->len = n;\f kfree(r);\n\tr->len\r+= 0;\x85\u2028\u2029\v\x1c\x1d\x1e;\n"
    ).replace("\treturn v;", "\treturn v;\f return table[i];")
    ids = history(tmp_path / "src", [{"drv.c": repos.DRIVER_C.encode()}, {"drv.c": patched.encode()}])
    box = tmp_path / "p.mbx"
    box.write_bytes(format_patch(tmp_path / "src", "-1"))
    (tree,) = landed(tmp_path / "src", ids[0], box, tmp_path / "am")
    assert tree["drv.c"] == patched.encode()  # git keeps every one of them inside its line
    (patch,) = reviewed(tmp_path / "src", ids[0], box)
    assert_same(patch, tree)
    plan = review.plan(patch, tmp_path, OPTIONS)
    line = repos.line_of(patched, "kfree(r)")
    assert line in plan.files["drv.c"].changed
    assert {u.name for f in plan.files.values() for u in f.touched()} == {"drv_read", "drv_index"}


def test_a_commit_with_a_form_feed_in_a_line_is_reviewed_with_that_line_changed(tmp_path):
    """A commit under review is diffed blob to blob (libgit2) and the diff parsed as a patch's: the line with two
    frees is one changed line of drv_read, as git shows it; the parse broke it in two, ended the hunk early by
    its count and lost the change after it."""
    patched = repos.DRIVER_C.replace("\tr->len = n;\n", "\tr->len = n;\f kfree(r);\u2028\n").replace(
        "\treturn 0;", "\treturn 1;"
    )
    history(tmp_path / "src", [{"drv.c": repos.DRIVER_C.encode()}, {"drv.c": patched.encode()}])
    repo = gitrepo.Repository(tmp_path / "src")
    patch = series.commit(repo, repo.commit("HEAD"), OPTIONS.wants)
    plan = review.plan(patch, tmp_path, OPTIONS)
    assert plan.files["drv.c"].changed == {repos.line_of(patched, "kfree(r)"), repos.line_of(patched, "return 1")}
    assert [u.name for u in plan.files["drv.c"].touched()] == ["drv_read"]


def test_a_mail_naming_one_file_twice_is_applied_diff_after_diff(tmp_path):
    """The first diff takes drv_read's bound out, the second changes drv_index: git applies both; reviewing
    each against the base kept the bound in what was audited, and showed drv_read as unchanged."""
    stepped = repos.DRIVER_PATCHED.replace("\tv += 1;\n", "")  # the bound gone, drv_index as before
    commits = [
        {"drv.c": repos.DRIVER_C.encode()},
        {"drv.c": stepped.encode()},
        {"drv.c": repos.DRIVER_PATCHED.encode()},
    ]
    tree, patch = spliced(tmp_path, commits)
    assert tree["drv.c"] == repos.DRIVER_PATCHED.encode()
    plan = review.plan(patch, tmp_path, OPTIONS)
    assert {u.name for f in plan.files.values() for u in f.touched()} == {
        "drv_read",
        "drv_index",
    }  # the removed bound is in view
    assert repos.line_of(repos.DRIVER_PATCHED, "r->len + n") in plan.files["drv.c"].changed


def test_a_rename_then_a_change_of_the_renamed_file_in_one_mail(tmp_path):
    """git reads a rename from the files before the mail and a later diff of the new name on top of it."""
    commits = [
        {"old.c": repos.DRIVER_C.encode()},
        {"old.c": None, "drv.c": repos.DRIVER_C.encode()},
        {"drv.c": repos.DRIVER_PATCHED.encode()},
    ]
    tree, _ = spliced(tmp_path, commits)
    assert tree == {"drv.c": repos.DRIVER_PATCHED.encode()}


def test_a_hunk_away_from_its_header_lands_where_git_apply_puts_it(tmp_path):
    """Over a file of repeated lines, a hunk whose header names each line in turn (so git searches: one line
    after, one before, two after..., never against lines an earlier hunk wrote, at the start for a hunk at line
    1 and at the end for one without trailing context) lands where `git apply` lands it, or nowhere when git
    refuses it."""
    old = "p\nq\n" * 4 + "p\n"
    ok(tmp_path, "init", "-q")
    hunks = {
        "middle": (" p\n-q\n+Q\n p\n", 3, 3),
        "no trailing context": (" p\n-q\n+Q\n", 2, 2),
        "two hunks": (" p\n-q\n+Q\n p\n@@ -{n},3 +{n},3 @@\n p\n-q\n+R\n p\n", 3, 3),
    }
    for name, (body, before, after) in hunks.items():
        for n in range(1, 10):
            (tmp_path / "f.c").write_text(old)
            diff = f"--- a/f.c\n+++ b/f.c\n@@ -{n},{before} +{n},{after} @@\n" + body.format(n=n)
            (tmp_path / "d.patch").write_text(diff)
            applied = git(tmp_path, "apply", "d.patch")
            (change,) = patches.parse(diff)
            try:
                ours = patches.apply(old.encode(), change)
            except patches.PatchError:
                ours = None
            theirs = (tmp_path / "f.c").read_bytes() if applied.returncode == 0 else None
            assert ours == theirs, (name, n)


def test_a_no_newline_mark_in_another_language_ends_the_line_as_for_git(tmp_path):
    """git takes any line starting with a backslash and a space after a hunk as "\\ No newline at end of file":
    here its context line then lacks its newline, and git glues the file's next line to it, into its comment
    (`kfree(buf);` is gone). The review saw the English mark only, and so a file where the free stayed."""
    old = "int f(char *buf)\n{\n\tint x = 0; // note\n\tkfree(buf);\n\treturn x;\n}\n"
    diff = (
        "--- a/f.c\n+++ b/f.c\n@@ -1,3 +1,4 @@\n int f(char *buf)\n+/* hi */\n {\n \tint x = 0; // note\n"
        "\\ Kein Zeilenumbruch am Dateiende.\n"
    )
    ok(tmp_path, "init", "-q")
    (tmp_path / "f.c").write_text(old)
    (tmp_path / "d.patch").write_text(diff)
    ok(tmp_path, "apply", "d.patch")
    landed = (tmp_path / "f.c").read_bytes()
    assert b"// note\tkfree(buf);" in landed  # git's reading
    (change,) = patches.parse(diff)
    assert patches.apply(old.encode(), change) == landed


def mail(body: bytes, headers: str = "") -> bytes:
    """A mail of ``git format-patch``'s shape with ``body`` under ``headers``."""
    top = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: Ann <ann@example.org>\n"
    return f"{top}Subject: [PATCH] drv: one\n{headers}\n".encode() + body


def driver_change(tmp_path: Path, patched: str) -> tuple[Path, str, bytes]:
    """(repository, base commit, the mail body `git format-patch` writes) of the driver patched to ``patched``."""
    ids = history(tmp_path / "src", [{"drv.c": repos.DRIVER_C.encode()}, {"drv.c": patched.encode()}])
    box = format_patch(tmp_path / "src", "-1")
    return tmp_path / "src", ids[0], box[box.index(b"\n\n") + 2 :]


def test_a_mail_body_is_decoded_as_git_am_decodes_it(tmp_path):
    """Python's mail parser decoded a body marked x-uuencode, which git leaves as it is: the mail carried the
    bound's removal in plain text, which git applies, and a harmless diff uuencoded, which the review saw. A
    quoted-printable body with white space at a line's end (Python's decoder drops it, git keeps it) and a base64
    one are read as git reads them."""
    patched = repos.DRIVER_PATCHED.replace("\tr->len = n;\n", "\tr->len = n; \n")
    source, base, body = driver_change(tmp_path, patched)
    decoy = repos.DRIVER_C.replace("\treturn v;", "\treturn v + 0;")
    _, _, harmless = driver_change(tmp_path / "decoy", decoy)
    uu = b"".join(binascii.b2a_uu(harmless[i : i + 45]) for i in range(0, len(harmless), 45))
    quoted = body.replace(b"=", b"=3D").replace(b"buf, from,", b"buf, f=\nrom,")
    mails = {
        "x-uuencode": body + b"begin 644 harmless.patch\n" + uu + b"`\nend\n",
        "quoted-printable": quoted,
        "base64": base64.encodebytes(body),
    }
    for encoding, text in mails.items():
        box = tmp_path / f"{encoding}.mbx"
        box.write_bytes(mail(text, f"Content-Transfer-Encoding: {encoding}\n"))
        (tree,) = landed(source, base, box, tmp_path / f"am-{encoding}")
        assert tree["drv.c"] == patched.encode(), encoding
        (patch,) = reviewed(source, base, box)
        assert_same(patch, tree)


def test_a_multipart_mail_is_refused_since_git_applies_every_part(tmp_path):
    """git am applies the diff of every part, an attachment of any type too; the review read the text parts
    only (and without the newline before a part's boundary). Such a mail is refused, in one sentence."""
    source, base, body = driver_change(tmp_path, repos.DRIVER_PATCHED)
    text, diff = body.split(b"---\n", 1)
    second = diff.rindex(b"\n@@ ") + 1  # the drv_index hunk goes to the attachment, under the same file header
    first, attached = diff[:second], diff[: diff.index(b"\n@@ ") + 1] + diff[second:]
    parts = (
        b"--XX\nContent-Type: text/plain\n\n" + text + b"---\n" + first + b"--XX\n"
        b"Content-Type: application/octet-stream\n\n" + attached + b"--XX--\n"
    )
    box = tmp_path / "mp.mbx"
    box.write_bytes(mail(parts, 'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="XX"\n'))
    (tree,) = landed(source, base, box, tmp_path / "am")
    assert tree["drv.c"] == repos.DRIVER_PATCHED.encode()  # both parts' hunks
    with pytest.raises(patches.PatchError, match="multipart") as refused:
        mbox.read(box)
    assert str(refused.value).count(". ") == 0


def test_a_file_changed_then_deleted_in_one_mail_stays_changed_as_git_leaves_it(tmp_path):
    """git removes every file a diff deletes or rewrites, then writes every diff's result: a file one diff changes
    and a later one deletes stays, changed. The review had it deleted, and the change (the bound taken out of
    drv_read) was never audited."""
    commits = [
        {"drv.c": repos.DRIVER_C.encode(), "z.c": b"int z;\n"},
        {"drv.c": repos.DRIVER_PATCHED.encode()},
        {"drv.c": None, "z.c": b"int z = 1;\n"},
    ]
    tree, patch = spliced(tmp_path, commits)
    assert tree["drv.c"] == repos.DRIVER_PATCHED.encode()
    plan = review.plan(patch, tmp_path, OPTIONS)
    assert {u.name for f in plan.files.values() for u in f.touched()} == {"drv_read", "drv_index"} and not plan.notes


# a line of a file may look like diff syntax once prefixed ("-- ", "++", "-@@", " \\ "): git counts a hunk's lines
LINE = st.text(st.sampled_from("ab{};\t -+@\\" + SEPARATORS), max_size=5)


@st.composite
def edited(draw: st.DrawFn, lines: list[str]) -> list[str]:
    """``lines`` with a few of them replaced, inserted or removed."""
    out = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(out)))
        kind = draw(st.sampled_from(["insert", "replace", "delete"]))
        if kind == "insert" or at == len(out):
            out.insert(at, draw(LINE))
        elif kind == "replace":
            out[at] = draw(LINE)
        else:
            del out[at]
    return out


def text(lines: list[str], newline_at_end: bool) -> bytes:
    body = "\n".join(lines)
    return (body + "\n" if newline_at_end and lines else body).encode()


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_the_review_audits_exactly_what_git_am_lands(tmp_path_factory, data):
    """Generated files (every separator inside their lines, a missing last newline at times), changed by two
    commits that modify, rename or copy a file and then change, delete or rename it: sent as a series of two
    mails and as one mail naming the file twice, each body as format-patch writes it, quoted-printable or base64.
    Where git applies it, the review audits git's files; where git refuses, the review refuses too."""
    tmp = tmp_path_factory.mktemp("am")
    base = data.draw(st.lists(LINE, min_size=3, max_size=10), label="base")
    middle = data.draw(edited(base), label="middle")
    final = data.draw(edited(middle), label="final")
    ends = data.draw(st.tuples(st.booleans(), st.booleans(), st.booleans()), label="newline at end")
    how = data.draw(st.sampled_from(["modify", "rename", "copy"]), label="first commit")
    encoding = data.draw(st.sampled_from(["8bit", "quoted-printable", "base64"]), label="body encoding")
    then = data.draw(st.sampled_from(["modify", "delete", "rename"]), label="second commit")
    first = "a.c" if how == "modify" else "b.c"
    commits: list[dict[str, bytes | None]] = [
        {"a.c": text(base, ends[0]), "z.c": b"int z;\n"},
        {first: text(middle, ends[1]), "z.c": b"int z = 1;\n"},
        {first: text(final, ends[2]), "z.c": b"int z = 2;\n"},  # never an empty commit
    ]
    if how == "rename":
        commits[1]["a.c"] = None
    if then != "modify":
        commits[2][first] = None
    if then == "rename":
        commits[2]["c.c"] = text(final, ends[2])
    ids = history(tmp / "src", commits)
    two = format_patch(tmp / "src", f"{ids[0]}..{ids[2]}")
    for name, box in (("series", two), ("one", one_mail(two))):
        path = tmp / f"{name}.mbx"
        path.write_bytes(encoded(box, encoding))
        trees = landed(tmp / "src", ids[0], path, tmp / f"am-{name}")
        found = reviewed(tmp / "src", ids[0], path)
        if trees is None:
            assert any(p.error for p in found), f"{name}: git refused what the review read"
            continue
        for patch, tree in zip(found, trees, strict=True):
            assert_same(patch, tree)


def test_a_hunk_that_matches_nowhere_in_many_identical_lines_costs_linear_work():
    """A hunk of H identical lines and one that is nowhere, over N identical lines: every place nearly matches.
    The work (Python lines run in k3lsp/git/patches.py, counted by a tracer) stays within a constant times N + H;
    the search that compared the hunk at every place ran N x H of them (120 KB mail: 30 s)."""
    n, h = 4000, 400
    old = b"x;\n" * n
    diff = f"--- a/f.c\n+++ b/f.c\n@@ -2000,{h + 2} +2000,{h + 2} @@\n" + " x;\n" * h + "-y;\n+z;\n x;\n"
    (change,) = patches.parse(diff)
    budget = 60 * (n + h)
    counted = 0

    def tracer(frame, event, arg):
        nonlocal counted
        if frame.f_code.co_filename != patches.__file__:
            return None
        if event == "line":
            counted += 1
            if counted > budget:
                raise AssertionError(f"more than {budget} lines run to apply one hunk to {n} lines")
        return tracer

    previous = sys.gettrace()  # a coverage tool's, say: given back after
    sys.settrace(tracer)
    try:
        with pytest.raises(patches.PatchError, match="does not apply"):
            patches.apply(old, change)
    finally:
        sys.settrace(previous)
    assert 0 < counted <= budget


def test_hunks_far_from_their_headers_are_refused_past_the_cap():
    """Every hunk's header says line 2 while its lines are a thousand and more lines down: git searches that far
    for each; placing them all here would cost more than the cap (64 lines searched per line of file and patch),
    so the patch is refused in one sentence. The same hunks with true headers apply."""
    old = "".join(f"l{i};\n" for i in range(1, 2001)).encode()
    starts = range(1000, 2000, 10)
    hunk = "@@ -{at},3 +{at},3 @@\n l{a};\n-l{b};\n+m{b};\n l{c};\n"
    lying = "".join(hunk.format(at=2, a=a, b=a + 1, c=a + 2) for a in starts)
    (change,) = patches.parse("--- a/f.c\n+++ b/f.c\n" + lying)
    with pytest.raises(patches.PatchError, match="lies too far") as refused:
        patches.apply(old, change)
    assert str(refused.value).count(". ") == 0
    (true,) = patches.parse(
        "--- a/f.c\n+++ b/f.c\n" + "".join(hunk.format(at=a, a=a, b=a + 1, c=a + 2) for a in starts)
    )
    assert patches.apply(old, true).count(b"\nm") == len(starts)


def test_a_subject_of_many_encoded_words_is_refused_past_the_cap(tmp_path):
    """Python's mail parser decodes a header of many RFC 2047 words in quadratic time (560 KB: 29 s): a header
    longer than the cap is refused, in one sentence naming it, before it is decoded."""
    words = " ".join(["=?utf-8?q?ab?="] * 8000)  # 120 KB
    box = tmp_path / "long.mbx"
    box.write_bytes(
        b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        + f"From: Ann <ann@example.org>\nSubject: {words}\n\n".encode()
        + b"diff --git a/f.c b/f.c\n--- a/f.c\n+++ b/f.c\n@@ -1 +1 @@\n-a\n+b\n"
    )
    with pytest.raises(patches.PatchError) as refused:
        mbox.read(box)
    message = str(refused.value)
    assert "Subject" in message and str(mbox.MAX_HEADER_BYTES) in message and message.count(". ") == 0
