"""Files a repository ships or a flag names are read as untrusted: a regular file, inside the repository, bounded.

The attack (issue 38, items 5 and 9): `.k3audit-baseline.json` as a symlink to `/dev/zero` made `k3lsp audit`
read until memory ran out (`error: MemoryError:` under a limit, 22 GB without); as a FIFO it blocked the run in
`open()`, and the blocked run outlived SIGTERM; as a symlink out of the repository it silenced findings with a
file the repository does not hold. `--server-key /dev/zero` and `eval fixes --list /dev/zero` read until the
machine killed them. Now every such file goes through ``k3lsp.wire.supplied.read``: looked at before it is
opened, opened without blocking and (a repository's) without a link out, a regular file by the opened
descriptor's status, at most its cap read.

Every child here runs under a data-size limit and a timeout, so the code before the fix fails these tests
instead of eating the machine or hanging them.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types as lsp

from k3lsp.findings import suppress
from k3lsp.wire import keys, supplied
from k3lsp.witnesses import flags
from tests.eval import castle_data
from tests.kbuild import trees
from tests.review import repos
from tests.support import kimi
from tests.support.batch import k3lsp_env
from tests.support.fake_daemon import FakeScript
from tests.support.lsp import editor

DATA_LIMIT = 512 * 1024 * 1024  # far above what a k3lsp command needs, far below what /dev/zero gives
TIMEOUT = 60  # a run here takes a second or two; the code before the fix blocked forever on a FIFO
SOURCE = "int slot(int *v, int i)\n{\n\treturn v[i];\n}\n"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))


def bounded_k3lsp(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`k3lsp ARGS` under a data limit, SIGKILLed (by its PID) when it outlives TIMEOUT: a hung child fails the
    test without hanging it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "k3lsp.cli", *args],
        cwd=cwd,
        env=k3lsp_env(cwd / "cache"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limited,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"k3lsp {' '.join(args)} was still running after {TIMEOUT} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def proj(tmp_path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "slot.c").write_text(SOURCE)
    return root


def audit(tmp_path: Path) -> subprocess.CompletedProcess:
    """`k3lsp audit proj` with no daemon to reach (a socket in a private folder that nobody binds): the baseline
    is read before the first unit is sent, so the run ends at once with the baseline's error or the daemon's."""
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir(mode=0o700)
    return bounded_k3lsp("audit", "proj", "--json", "--endpoint", f"ipc://{nowhere}/daemon.sock", cwd=tmp_path)


# --- item 5: the baseline, and the other files a repository ships ---------------------------------------------


def test_a_baseline_linked_to_dev_zero_is_refused_not_read(proj, tmp_path):
    (proj / suppress.BASELINE_NAME).symlink_to("/dev/zero")
    done = audit(tmp_path)
    assert "MemoryError" not in done.stderr, done.stderr
    assert f"cannot read {proj / suppress.BASELINE_NAME}: it is a symbolic link to /dev/zero" in done.stderr
    assert done.returncode == 2


def test_a_baseline_fifo_never_blocks_the_run(proj, tmp_path):
    os.mkfifo(proj / suppress.BASELINE_NAME)
    done = audit(tmp_path)  # before the fix: blocked in open() until the timeout's SIGKILL
    assert "it is a FIFO (named pipe), not a regular file" in done.stderr, done.stderr
    assert done.returncode == 2


def test_a_baseline_linked_out_of_the_repository_silences_nothing(proj, tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"version": 1, "findings": [{"fingerprint": "f" * 16, "cwe": 129}]}))
    (proj / suppress.BASELINE_NAME).symlink_to(outside)
    baseline = suppress.Baseline.load(proj)
    assert "f" * 16 not in baseline
    assert baseline.error is not None and "outside" in baseline.error and "symbolic link" in baseline.error


def test_a_baseline_inside_the_repository_may_be_a_link(proj):
    """A link that stays inside is the repository's own file: it counts."""
    (proj / "tools").mkdir()
    (proj / "tools" / "baseline.json").write_text(json.dumps({"version": 1, "findings": [{"fingerprint": "ab"}]}))
    (proj / suppress.BASELINE_NAME).symlink_to("tools/baseline.json")
    baseline = suppress.Baseline.load(proj)
    assert baseline.error is None and "ab" in baseline


def test_a_compile_database_linked_out_of_the_repository_is_not_read(proj, tmp_path):
    outside = tmp_path / "compile_commands.json"
    entry = {"directory": str(proj), "file": "slot.c", "arguments": ["cc", "-DFROM_OUTSIDE=1", "-c", "slot.c"]}
    outside.write_text(json.dumps([entry]))
    (proj / flags.DATABASE).symlink_to(outside)
    assert flags.for_file(proj / "slot.c", proj) is None
    (proj / flags.DATABASE).unlink()
    (proj / flags.DATABASE).write_text(json.dumps([entry]))  # the same database in the repository: used
    assert flags.for_file(proj / "slot.c", proj).defines == ("-DFROM_OUTSIDE=1",)


# --- the reader itself, with small caps -----------------------------------------------------------------------


def test_the_reader_takes_a_regular_file_up_to_its_cap_and_says_why_it_refuses(tmp_path):
    (tmp_path / "ok").write_bytes(b"x" * 10)
    assert supplied.read(tmp_path / "ok", 10) == b"x" * 10
    with pytest.raises(supplied.Refused, match="11 bytes are over the limit of 10 bytes"):
        (tmp_path / "big").write_bytes(b"x" * 11)
        supplied.read(tmp_path / "big", 10)
    with pytest.raises(supplied.Refused, match="it is a character device, not a regular file"):
        supplied.read("/dev/zero", 10)
    with pytest.raises(supplied.Refused, match="it is a directory"):
        supplied.read(tmp_path, 10)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(supplied.Refused, match="FIFO"):
        supplied.read(tmp_path / "fifo", 10)
    with pytest.raises(FileNotFoundError):
        supplied.read(tmp_path / "missing", 10)


# --- item 9: files a flag names -------------------------------------------------------------------------------


@pytest.fixture
def client_keys(tmp_path) -> Path:
    """A client's real secret key (k3lsp keys init), so only the server key is wrong."""
    keys.init_keypair(tmp_path / "keys", "me")
    return tmp_path / "keys" / "me.key_secret"


def status(server_key: Path | str, client_key: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """`k3lsp status` with a server key; port 9 (discard) on loopback: the key is read before any connection."""
    args = ("--server-key", str(server_key), "--client-key", str(client_key), "--endpoint", "tcp://127.0.0.1:9")
    return bounded_k3lsp("status", *args, cwd=tmp_path)


def test_a_server_key_flag_naming_dev_zero_is_refused_in_words(client_keys, tmp_path):
    done = status("/dev/zero", client_keys, tmp_path)  # before the fix: read until MemoryError (22 GB unbounded)
    assert done.stderr.strip() == (
        "k3lsp status: cannot read key file /dev/zero: it is a character device, not a regular file; refused"
    ), done.stderr
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("public-key\n", 'it has no public-key = "..." line'),  # was IndexError: list index out of range
        (f'public-key = "{"~" * 40}"\n', "its public key is not 40 z85 characters"),  # was ZMQError: Invalid argument
        ("# nothing here\n", 'it has no public-key = "..." line'),
    ],
)
def test_a_malformed_server_key_is_named_and_explained(client_keys, tmp_path, text, says):
    bad = tmp_path / "bad.key"
    bad.write_text(text)
    done = status(bad, client_keys, tmp_path)
    assert done.stderr.strip() == f"k3lsp status: {bad} is not a CurveZMQ key file: {says}", done.stderr
    assert done.returncode == 2


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    repos.repository(root, {"slot.c": SOURCE})
    return root


def test_eval_fixes_list_naming_dev_zero_or_a_fifo_is_refused_in_words(repo, tmp_path):
    done = bounded_k3lsp("eval", "fixes", "--repo", str(repo), "--list", "/dev/zero", cwd=tmp_path)
    assert done.stderr.strip() == (
        "k3lsp eval fixes: cannot read --list /dev/zero: it is a character device, not a regular file; refused"
    ), done.stderr  # before the fix: error: MemoryError:
    os.mkfifo(tmp_path / "fifo")
    done = bounded_k3lsp("eval", "fixes", "--repo", str(repo), "--list", str(tmp_path / "fifo"), cwd=tmp_path)
    assert "it is a FIFO (named pipe), not a regular file" in done.stderr, done.stderr  # before: blocked in open()
    assert done.returncode == 2


def test_eval_castle_naming_dev_zero_as_its_dataset_is_refused_in_words(tmp_path):
    done = bounded_k3lsp("eval", "castle", "/dev/zero", cwd=tmp_path)
    assert done.stderr.strip() == (
        "k3lsp eval castle: cannot read /dev/zero: it is a character device, not a regular file; refused"
    ), done.stderr  # before the fix: error: MemoryError:


def test_review_patch_naming_dev_zero_is_refused_in_words(repo, tmp_path):
    done = bounded_k3lsp("review", "-C", str(repo), "--patch", "/dev/zero", cwd=tmp_path)
    said = "k3lsp review: error: cannot read /dev/zero: it is a character device, not a regular file"
    assert said in done.stderr, done.stderr  # before the fix: error: MemoryError:
    assert "MemoryError" not in done.stderr and done.returncode == 2


def test_eval_out_naming_a_file_says_so_in_words(tmp_path):
    dataset = castle_data.write(tmp_path / "castle.json", castle_data.dataset())
    (tmp_path / "taken").write_text("a file, not a directory\n")
    done = bounded_k3lsp(
        "eval", "castle", str(dataset), "--out", "taken", "--endpoint", "ipc:///nonexistent/d.sock", cwd=tmp_path
    )
    assert done.stderr.strip().endswith(
        "--out taken: it is a file, not a directory; give a directory for the report (it is made when missing)"
    ), done.stderr  # before the fix: error: FileExistsError: [Errno 17] File exists: 'taken'
    assert done.returncode == 2


async def test_the_language_server_with_a_fifo_baseline_answers_and_says_why(proj, tmp_path):
    """The language server loads the baseline when it starts: a FIFO there blocked its event loop for good."""
    os.mkfifo(proj / suppress.BASELINE_NAME)
    script = FakeScript(tmp_path / "fake-daemon.json")
    script.write({"units": {"slot": {"findings": [kimi.finding(cwe=129, start_line=3, end_line=3, trace=[])]}}})
    async with editor(proj, fake=script, cache_dir=tmp_path / "c") as ed:
        uri = ed.open("slot.c")
        assert (await ed.command("k3lsp.auditFile", uri))["findings"] == 1
        said = await ed.wait_for(lambda: [m for m in ed.shown(lsp.MessageType.Error) if "baseline" in m])
    assert "it is a FIFO (named pipe), not a regular file; refused" in said[0]


KERNEL = trees.layout("kernel/", "CONFIG_NET=y\n") | {"kernel/core.c": SOURCE}


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("how", ["dev zero", "fifo"])
def test_a_kconfig_flag_naming_dev_zero_or_a_fifo_is_refused_in_words(tmp_path, how):
    """`--kconfig` names a .config: read as every file a flag names is (it read /dev/zero until MemoryError and
    blocked on a FIFO)."""
    trees.write(tmp_path, KERNEL | {"kernel/Makefile": "obj-y += core.o\n"})
    named = "/dev/zero" if how == "dev zero" else str(fifo(tmp_path / "pipe.config"))
    done = bounded_k3lsp("audit", "kernel", "--kconfig", named, "--only-built", cwd=tmp_path)
    kind = "a character device" if how == "dev zero" else "a FIFO (named pipe)"
    assert f"kconfig '{named}' cannot be read (it is {kind}, not a regular file" in done.stderr, done.stderr
    assert "MemoryError" not in done.stderr and done.returncode == 2


def test_a_kernel_trees_makefile_linked_out_of_the_tree_is_not_read(tmp_path):
    """A hostile tree's kernel/Makefile as a link to a Makefile outside the tree that says core.c is not built:
    `k3lsp audit --kconfig --only-built` skipped core.c on the word of a file the tree does not hold. Now it is
    not read, and what it would decide is unknown, so audited. (A Makefile that is a device or a FIFO was never
    read: kbuild's walk takes regular files only, and the reader now checks the file it opened too.)"""
    trees.write(tmp_path / "tree", KERNEL)
    (tmp_path / "outside.mk").write_text("obj-$(CONFIG_NOPE) += core.o\n")
    (tmp_path / "tree" / "kernel" / "Makefile").symlink_to(tmp_path / "outside.mk")
    done = bounded_k3lsp("audit", "kernel", "--kconfig", ".config", "--only-built", cwd=tmp_path / "tree")
    assert "not built" not in done.stderr, done.stderr  # core.c is not skipped on the outside file's word
    assert "1 of 1 units not audited: no daemon left" in done.stderr, done.stderr  # it was sent
