"""The allow-list directory: a directory that changes under it never raises, a bad key file costs only itself,
and a directory or key file that others could write never decides who gets in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import zmq.auth

from backend import allowlist, auth
from backend.allowlist import AllowList
from k3lsp.wire import keys


def _client(directory: Path, name: str) -> bytes:
    public, secret = zmq.auth.create_certificates(directory, name)
    Path(secret).unlink()  # the allow-list holds public keys only
    return zmq.auth.load_certificate(public)[0]


@pytest.fixture
def keydir(tmp_path) -> Path:
    directory = tmp_path / "authorized"
    directory.mkdir(mode=0o700)
    return directory


def test_a_key_file_deleted_between_listing_and_reading_is_skipped(keydir, monkeypatch):
    kept, gone = _client(keydir, "kept"), _client(keydir, "gone")
    real_listdir = os.listdir

    def racing_listdir(path):
        names = real_listdir(path)
        if (keydir / "gone.key").exists():
            (keydir / "gone.key").unlink()  # removed after the listing, before it is read
        return names

    monkeypatch.setattr(allowlist.os, "listdir", racing_listdir)
    allow = AllowList(keydir)
    assert allow.allows(kept) and not allow.allows(gone)
    assert allow.problems == []


def test_a_malformed_key_file_is_reported_by_name_and_the_valid_keys_keep_working(keydir, caplog):
    alice, bob = _client(keydir, "alice"), _client(keydir, "bob")
    (keydir / "broken.key").write_text('metadata\ncurve\n    public-key = "short"\n')
    (keydir / "binary.key").write_bytes(b"\xff\xfe\x00garbage")
    (keydir / "dir.key").mkdir()
    allow = AllowList(keydir)
    assert allow.allows(alice) and allow.allows(bob)
    assert sorted(Path(p.split(":")[0]).name for p in allow.problems) == ["binary.key", "broken.key", "dir.key"]
    assert all(p.endswith("skipped") for p in allow.problems)
    assert "broken.key" in caplog.text


def test_a_key_file_others_may_write_is_skipped(keydir):
    alice, bob = _client(keydir, "alice"), _client(keydir, "bob")
    (keydir / "bob.key").chmod(0o666)  # anyone could put their own key in it
    allow = AllowList(keydir)
    assert allow.allows(alice) and not allow.allows(bob)
    assert len(allow.problems) == 1 and "bob.key" in allow.problems[0] and "writable" in allow.problems[0]


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_directory_others_may_write_refuses_every_key_and_serve_refuses_it(keydir, tmp_path, mode):
    alice = _client(keydir, "alice")
    live = AllowList(keydir, reload_seconds=0)
    assert live.allows(alice)
    keydir.chmod(mode)  # from now on anyone could add a key
    assert not live.allows(alice)
    assert "writable by group or others" in live.problems[0] and "refusing every client" in live.problems[0]
    keydir.chmod(0o700)
    assert live.allows(alice)  # fixed: served again without a restart

    keydir.chmod(mode)
    keys.init_keypair(tmp_path / "server", "server")
    security = auth.Security(server_secret=tmp_path / "server" / "server.key_secret", authorized_dir=keydir)
    with pytest.raises(auth.InsecureBindError, match="writable by group or others"):
        auth.check("tcp://0.0.0.0:5555", security)


def test_a_directory_of_another_user_refuses_every_key(keydir):
    alice = _client(keydir, "alice")
    if os.geteuid() != 0:
        pytest.skip("making a directory owned by another user needs root")
    os.chown(keydir, 65534, 65534)
    allow = AllowList(keydir)
    assert not allow.allows(alice)
    assert "owned by another user (uid 65534)" in allow.problems[0]


def test_the_directory_is_looked_at_once_per_reload_period(keydir, monkeypatch):
    key = _client(keydir, "alice")
    scans = []
    real_scandir = os.scandir
    monkeypatch.setattr(allowlist.os, "scandir", lambda path: scans.append(path) or real_scandir(path))
    slow = AllowList(keydir, reload_seconds=3600)
    assert slow.allows(key)
    first = len(scans)
    assert all(slow.allows(key) for _ in range(100))
    assert len(scans) == first > 0  # not once per message
    (keydir / "alice.key").unlink()
    assert slow.allows(key)  # stale until the period ends
    live = AllowList(keydir, reload_seconds=0)
    assert not live.allows(key)


def test_a_key_file_the_parser_cannot_read_is_said_in_words_and_a_huge_one_is_not_read(keydir):
    """pyzmq's reader raised IndexError on a key line without `=` and read any file to its end; the daemon now
    reads key files as k3lsp does (k3lsp.wire.keys, k3lsp.wire.supplied)."""
    alice = _client(keydir, "alice")
    (keydir / "noeq.key").write_text("public-key\n")
    with open(keydir / "huge.key", "wb") as f:  # sparse: no disk, and nothing to read before the cap refuses it
        f.truncate(64 << 20)  # one line of 64 MiB: what pyzmq's reader held at once
    allow = AllowList(keydir)
    assert allow.allows(alice)
    said = {Path(p.split(":")[0]).name: p for p in allow.problems}
    assert 'it has no public-key = "..." line' in said["noeq.key"] and "IndexError" not in said["noeq.key"]
    assert "67,108,864 bytes are over the limit of 64 KiB" in said["huge.key"]
