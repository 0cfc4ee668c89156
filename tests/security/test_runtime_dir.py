"""Another user cannot stop this user's daemon and editors by making their runtime directory first.

The attack: without a login session's /run/user/UID (ssh without pam_systemd, containers, CI), the default
socket's directory is ``runtime-UID`` in the shared temporary directory, and whoever creates it first owns it.
platformdirs then raised PermissionError from ``default_endpoint()``: the user's `k3-backend serve`, `k3lsp
audit`, `k3lsp status` and language server all stopped before doing anything. Now the default moves to a directory
under the user's home, and an endpoint whose directory cannot be checked says why and what to do.

The victim is a child process that drops to uid 65534 (root can enter anything, so it would never see the
PermissionError); the squatter is this test, as root.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from k3lsp.wire import local
from tests.security.test_local_access import NOBODY, OtherUser, shared_tmp  # noqa: F401 (a fixture)


def _as_the_victim(shared: str, home: str) -> dict:
    """In the victim's process: its default endpoint, and whether its socket directory is usable."""
    os.environ.pop("XDG_RUNTIME_DIR", None)
    os.environ.pop("K3LSP_ENDPOINT", None)
    os.environ |= {"HOME": home, "XDG_CACHE_HOME": f"{home}/.cache", "TMPDIR": shared}
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    endpoint = local.default_endpoint()
    socket = local.private_socket(endpoint)
    squatted = f"ipc://{shared}/runtime-{NOBODY}/k3lsp/daemon.sock"
    try:
        local.private_socket(squatted)
        refusal = None
    except local.LocalSocketError as exc:
        refusal = str(exc)
    return {"endpoint": endpoint, "mode": stat.S_IMODE(socket.parent.stat().st_mode), "refusal": refusal}


def test_a_runtime_directory_made_first_by_another_user_moves_the_default_home(shared_tmp):  # noqa: F811
    if Path(f"/run/user/{NOBODY}").exists():
        pytest.skip(f"/run/user/{NOBODY} exists here: the temporary fallback is not used")
    shared = shared_tmp / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    (shared / f"runtime-{NOBODY}").mkdir(mode=0o700)  # the squatter's, made before the victim's first login
    home = shared_tmp / "victim"
    home.mkdir(mode=0o700)
    os.chown(home, NOBODY, NOBODY)
    seen = OtherUser(_as_the_victim, str(shared), str(home)).result()
    assert seen["endpoint"] == f"ipc://{home}/.cache/k3lsp/run/daemon.sock", seen
    assert seen["mode"] == 0o700
    refusal = seen["refusal"]  # an endpoint set there by hand: refused with what to do, not a traceback
    assert refusal is not None and "Permission denied" in refusal and str(home / ".cache/k3lsp/run") in refusal


def test_a_runtime_directory_of_ones_own_stays_the_default(tmp_path, monkeypatch):
    """Where nobody squatted, nothing moves: daemon and editors agree on the temporary one as before."""
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(local.platformdirs, "user_runtime_dir", lambda app: f"/nonexistent/run/user/7/{app}")
    monkeypatch.setattr(local.tempfile, "gettempdir", lambda: str(tmp_path))
    assert local.default_endpoint() == f"ipc://{tmp_path}/runtime-{os.geteuid()}/k3lsp/daemon.sock"
    (tmp_path / f"runtime-{os.geteuid()}").mkdir(mode=0o700)
    assert local.default_endpoint() == f"ipc://{tmp_path}/runtime-{os.geteuid()}/k3lsp/daemon.sock"
