"""The secret checks hold on a case-insensitive volume (APFS and HFS+ by default): another spelling of a secret
place or name reaches the same file, and ``Path.resolve`` keeps the spelling the model typed.

The kernel here has neither vfat nor ext4 casefold, so the volume's lookup is shown with bind mounts: a second
name for the same directory (or file), as a case-insensitive lookup gives, with ``resolve`` keeping the name
typed. Mounting needs root or CAP_SYS_ADMIN; elsewhere the test is skipped with that reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from k3lsp.tools import sandbox


def _mount(source: Path, target: Path, *flags: str) -> None:
    subprocess.run(["mount", *flags, str(source), str(target)], check=True, capture_output=True, timeout=20)


@pytest.fixture
def folded_home(tmp_path, monkeypatch):
    """A home folder whose ~/Library is also reachable as library/application support/..., library/mail."""
    home = tmp_path / "home"
    support = home / "Library" / "Application Support"
    keys = support / "k3lsp" / "keys"
    keys.mkdir(parents=True)
    (keys / "alice-mac.key_secret").write_text("secret-key stolen_key\n")
    (keys / "alice-mac.key").write_text("public-key stolen_key\n")
    (home / "Library" / "Mail").mkdir()
    (home / "Library" / "Mail" / "inbox.txt").write_text("Subject: stolen_key\n")
    (home / "work").mkdir()
    (home / "work" / "main.c").write_text("int main(void) { return 0; }\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "cache"))
    # The other spellings, as the volume would resolve them: inner ones first, then the whole tree (rbind).
    (home / "Library" / "application support").mkdir()
    (home / "Library" / "mail").mkdir()
    (keys / "alice-mac.KEY_SECRET").write_text("")
    (home / "library").mkdir()
    mounts = []
    try:
        for source, target, flags in (
            (keys / "alice-mac.key_secret", keys / "alice-mac.KEY_SECRET", ("--bind",)),
            (support, home / "Library" / "application support", ("--rbind",)),
            (home / "Library" / "Mail", home / "Library" / "mail", ("--bind",)),
            (home / "Library", home / "library", ("--rbind",)),
        ):
            _mount(source, target, *flags)
            mounts.append(target)
    except (OSError, subprocess.SubprocessError) as e:
        for target in reversed(mounts):
            subprocess.run(["umount", "-R", str(target)], capture_output=True, timeout=20)
        pytest.skip(f"bind mounts are not allowed here (needs root or CAP_SYS_ADMIN): {e}")
    yield home
    for target in reversed(mounts):
        subprocess.run(["umount", "-R", str(target)], check=True, capture_output=True, timeout=20)


@pytest.mark.parametrize(
    "path",
    [
        "library/application support/k3lsp/keys/alice-mac.KEY_SECRET",
        "library/application support/k3lsp/keys/alice-mac.key",
        "Library/application support/k3lsp/keys/alice-mac.key",
        "Library/Application Support/k3lsp/keys/alice-mac.KEY_SECRET",
        "library/mail/inbox.txt",
    ],
)
def test_another_spelling_of_a_secret_is_refused(folded_home, path):
    assert (folded_home / path).read_text()  # the other spelling does reach the file
    ok, text = sandbox.run_tool(folded_home, "read_lines", {"path": path, "start": 1, "end": 3})
    assert not ok and "secrets are not available" in text, text
    assert "stolen_key" not in text


@pytest.mark.parametrize("path", ["library/mail", "library", "Library/application support", "library/Mail"])
def test_grep_under_another_spelling_of_a_secret_place_finds_nothing_secret(folded_home, path):
    ok, text = sandbox.run_tool(folded_home, "grep", {"pattern": "stolen_key", "path": path})
    assert not any(leak in text for leak in ("Subject:", "secret-key", "public-key", "inbox")), text
    assert (not ok and "secrets are not available" in text) or text.startswith("0 matching lines"), text


def test_the_workspace_itself_stays_searchable(folded_home):
    ok, text = sandbox.run_tool(folded_home, "grep", {"pattern": "main", "path": "work"})
    assert ok and "work/main.c:1:" in text
