"""The allow-list behind the ZAP handler: reading a directory that changes under it must never raise."""

from __future__ import annotations

import os
from pathlib import Path

import zmq.auth

from backend import auth


def _client(directory: Path, name: str) -> bytes:
    public, _ = zmq.auth.create_certificates(directory, name)
    Path(_).unlink()  # the allow-list holds public keys only
    return zmq.auth.load_certificate(public)[0]


def test_a_key_file_deleted_between_listing_and_stat_is_skipped(tmp_path, monkeypatch):
    kept, gone = _client(tmp_path, "kept"), _client(tmp_path, "gone")
    real_scandir = os.scandir

    def racing_scandir(path):
        if not (tmp_path / "gone.key").exists():
            return real_scandir(path)
        with real_scandir(path) as it:
            entries = list(it)
        (tmp_path / "gone.key").unlink()  # removed after the listing, before stat
        return iter(entries)

    monkeypatch.setattr(auth.os, "scandir", racing_scandir)
    allow = auth.AllowList(tmp_path)
    assert allow.callback(auth.ZAP_DOMAIN, kept)
    assert not allow.callback(auth.ZAP_DOMAIN, gone)


def test_the_zap_callback_denies_instead_of_raising(tmp_path, monkeypatch):
    key = _client(tmp_path, "alice")
    allow = auth.AllowList(tmp_path)
    assert allow.callback(auth.ZAP_DOMAIN, key)

    def broken(_directory):
        raise RuntimeError("unexpected")

    monkeypatch.setattr(auth, "load_certificates", broken)
    (tmp_path / "bob.key").write_text((tmp_path / "alice.key").read_text())  # a change forces a reload
    allow = auth.AllowList(tmp_path)
    assert allow.callback(auth.ZAP_DOMAIN, key) is False


def test_the_directory_is_looked_at_once_per_reload_period(tmp_path, monkeypatch):
    key = _client(tmp_path, "alice")
    scans = []
    real_scandir = os.scandir
    monkeypatch.setattr(auth.os, "scandir", lambda path: scans.append(path) or real_scandir(path))
    slow = auth.AllowList(tmp_path, reload_seconds=3600)
    assert slow.allows(key)
    first = len(scans)
    assert all(slow.allows(key) for _ in range(100))
    assert len(scans) == first > 0  # not once per message
    (tmp_path / "alice.key").unlink()
    assert slow.allows(key)  # stale until the period ends
    live = auth.AllowList(tmp_path, reload_seconds=0)
    assert not live.allows(key)
