"""The rules that confine the model's workspace tools: which files of a workspace it may see.

The model's requests are untrusted (the audited code can try to steer it), and so is the workspace itself (a
hostile repository). A file is in reach only when it is inside the workspace root: no `..`, no absolute path,
no hidden component (`.ssh`, `.git`, `.env`), no symlink that resolves outside the root or to a hidden file (or
loops), no file with other hard links (one may be a file outside the workspace), no file over
`MAX_FILE_BYTES`, no binary file (a NUL anywhere), and nothing in a known secret place, wherever the workspace
is (a workspace at the home folder): the key and cache directories of k3lsp and k3-backend, macOS's ~/Library
folders of credentials (`LIBRARY_SECRETS`), and secret-key file names (`SECRET_NAMES`).

Secret places are compared by identity (device and inode of each directory above the file), not by spelling:
APFS and HFS+ are case-insensitive, and ``Path.resolve`` keeps the case the model typed, so
``library/mail`` is ~/Library/Mail there. Secret names are compared case-folded for the same reason. Every
search (``k3lsp.tools.search``) and the symbol index (``k3lsp.tools.symbols``) keep to these rules through `Secrets`,
`resolve` and `vet`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from k3lsp.wire import cache, keys

MAX_FILE_BYTES = 2 * 1024 * 1024
# macOS ~/Library folders holding credentials and private data (not Mobile Documents: iCloud Drive may hold code).
LIBRARY_SECRETS = (
    "Keychains",
    "Cookies",
    "Application Support",
    "Containers",
    "Group Containers",
    "Mail",
    "Messages",
    "Safari",
)
# Private keys and key stores, by name (lower case: names are compared case-folded), wherever they lie.
SECRET_NAMES = (
    "*.key_secret",
    "*.pem",
    "*.p12",
    "*.pfx",
    "*.kdbx",
    "*.keychain",
    "*.keychain-db",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
)


class ToolError(Exception):
    """A refused or failed tool call; its message is what the model reads."""


def secret_places() -> tuple[Path, ...]:
    """Directories whose files never reach the model, even inside the workspace: this machine's k3lsp and
    k3-backend keys, the result cache (and the symbol indexes beside it), and macOS's ~/Library folders of
    credentials (keychains, cookies, mail)."""
    places = (
        keys.default_dir("k3lsp"),
        keys.default_dir("k3-backend"),
        cache.default_path().parent,
        *(Path.home() / "Library" / name for name in LIBRARY_SECRETS),
    )
    return tuple(Path(os.path.realpath(p)) for p in places)


_SECRET_NAME = re.compile("|".join(fnmatch.translate(pattern) for pattern in SECRET_NAMES))


def secret_name(name: str) -> bool:
    return _SECRET_NAME.match(name.casefold()) is not None


class Secrets:
    """The secret places of this moment, by identity; one per tool call or index refresh (it caches each
    directory's verdict, and a secret place created later must count)."""

    def __init__(self) -> None:
        self._ids: set[tuple[int, int]] = set()
        for place in secret_places():
            try:
                info = place.stat()
            except OSError:  # a place that does not exist holds nothing to protect yet
                continue
            self._ids.add((info.st_dev, info.st_ino))
        self._dirs: dict[str, bool] = {}

    def covers(self, real: Path) -> bool:
        """Whether a resolved path is a secret: a secret name, or inside (or one of) the secret places."""
        return secret_name(real.name) or self.inside(str(real))

    def inside(self, directory: str) -> bool:
        """Whether a directory (an absolute path) is a secret place or below one."""
        verdict = self._dirs.get(directory)
        if verdict is None:
            try:
                info = os.stat(directory)
                verdict = (info.st_dev, info.st_ino) in self._ids
            except OSError:
                verdict = False
            parent = os.path.dirname(directory)
            if not verdict and parent != directory:
                verdict = self.inside(parent)
            self._dirs[directory] = verdict
        return verdict


def hidden(rel: PurePosixPath | Path) -> bool:
    """A path with a dot-component: .ssh, .git, .env hold secrets, not code to audit."""
    return any(part.startswith(".") for part in rel.parts)


def resolve(root: str | os.PathLike[str], path: Any, secrets: Secrets | None = None) -> Path:
    """The real path of a workspace-relative path, refusing anything that leaves the workspace."""
    if not isinstance(path, str) or not path.strip():
        raise ToolError("path must be a non-empty workspace-relative string")
    if "\0" in path:
        raise ToolError("path contains a NUL byte")
    posix = path.replace("\\", "/")
    rel = PurePosixPath(posix)
    if rel.is_absolute() or re.match(r"^[A-Za-z]:", posix):
        raise ToolError(f"{path}: absolute paths are not allowed; give a path relative to the workspace root")
    if ".." in rel.parts:
        raise ToolError(f"{path}: '..' is not allowed; paths stay inside the workspace")
    if hidden(rel):  # also what the searches never walk into
        raise ToolError(f"{path}: hidden files and directories are not available to the model")
    base = Path(root).resolve()
    try:
        real = (base / rel).resolve(strict=True)
    except FileNotFoundError:
        raise ToolError(f"{path}: no such file in the workspace") from None
    except (OSError, RuntimeError) as e:  # ELOOP: a symlink loop
        raise ToolError(f"{path}: cannot be resolved ({e.__class__.__name__}: symlink loop?)") from None
    if not real.is_relative_to(base):
        raise ToolError(f"{path}: resolves outside the workspace (symlink); refused")
    if hidden(real.relative_to(base)):
        raise ToolError(f"{path}: resolves to a hidden file (symlink); refused")
    if (secrets or Secrets()).covers(real):
        raise ToolError(f"{path}: keys and other secrets are not available to the model")
    return real


def check_file(real: Path, shown: str) -> os.stat_result:
    """A workspace file's status, refusing directories, special files, hard-linked and large files."""
    try:
        info = real.stat()
    except OSError as e:
        raise ToolError(f"{shown}: cannot be read ({e.__class__.__name__})") from None
    why = _refusal(info)
    if why:
        raise ToolError(f"{shown}: {why}")
    return info


def _refusal(info: os.stat_result) -> str:
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_nlink > 1:  # the other name may be anywhere on the disk, e.g. a linked ~/.ssh/id_rsa
        return "has other hard links, so it may be a file from outside the workspace; refused"
    if info.st_size > MAX_FILE_BYTES:
        return f"{info.st_size} bytes is over the {MAX_FILE_BYTES}-byte limit"
    return ""


def read_bytes(real: Path, shown: str) -> bytes:
    """A workspace file's bytes, refusing what `check_file` refuses and binary files."""
    check_file(real, shown)
    data = real.read_bytes()
    if b"\0" in data:
        raise ToolError(f"{shown}: binary file")
    return data


def read_text(real: Path, shown: str) -> str:
    return read_bytes(real, shown).decode("utf-8", "replace")


class Vetter:
    """Checks the files a search listed (workspace-relative, found by walking ``base`` without following
    symlinks, as ripgrep and ``search.walk`` do): each directory above a file is checked once. A kernel tree
    has 50,000 files, so this works on strings."""

    def __init__(self, base: Path) -> None:
        self.base = str(base)
        self.secrets = Secrets()
        self._dirs: dict[str, bool] = {"": not self.secrets.inside(self.base)}

    def vet(self, rel: str) -> os.stat_result | None:
        """The file's status when the model may see it, else None."""
        if not rel or "\0" in rel or "\n" in rel or "\r" in rel or rel.startswith("/"):
            return None
        folder, _, name = rel.rpartition("/")
        if name.startswith(".") or secret_name(name) or not self._dir(folder):
            return None
        real = os.path.join(self.base, rel)
        try:
            info = os.lstat(real)  # listed by name: a symlink now is not the file that was listed
        except OSError:
            return None
        return None if stat.S_ISLNK(info.st_mode) or _refusal(info) else info

    def folder(self, rel: str) -> bool:
        """Whether the files under a workspace-relative folder ("" for the root) may be shown (``_dir``)."""
        return "\0" not in rel and not rel.startswith("/") and self._dir(rel.rstrip("/"))

    def _dir(self, folder: str) -> bool:
        """A folder of the workspace that is no symlink (nor below one), not hidden, and no secret place."""
        verdict = self._dirs.get(folder)
        if verdict is None:
            parent, _, name = folder.rpartition("/")
            path = os.path.join(self.base, folder)
            try:
                verdict = (
                    self._dir(parent)
                    and name not in ("", ".", "..")
                    and not name.startswith(".")
                    and not stat.S_ISLNK(os.lstat(path).st_mode)
                    and not self.secrets.inside(path)
                )
            except OSError:
                verdict = False
            self._dirs[folder] = verdict
        return verdict
