"""The file system's change notices for a workspace: which folders the symbol index must list again.

A refresh that lists and stats the whole tree costs 1.3 s on Linux (45,828 files, issue 44), for the few files
an edit or a ``git checkout`` touched. So a child process, ``python -m k3lsp.tools.notices ROOT``, watches ROOT
with watchdog (inotify on Linux, FSEvents on macOS) and says what changed, one JSON line each:

- ``{"watching": true}`` once every folder is watched: a whole refresh that starts after this line misses nothing;
- ``{"folders": [[folder, deep], ...]}`` after a burst of changes (``QUIET`` seconds without a new one, at most
  ``LONGEST`` after its first): the workspace-relative folders to list again, ``deep`` for a whole subtree (a
  folder made, moved or deleted), else its own files only;
- ``{"all": why}`` when a burst touched more than ``MAX_FOLDERS`` folders (a build, a checkout of another
  release): listing the whole tree once is cheaper than folder by folder;
- ``{"unwatched": why}`` when the tree cannot be watched (inotify's watch limit): the index then refreshes the
  whole tree at most every ``symbols.REFRESH_SECONDS``, as it did before.

It ends when its stdin closes: the process that started it is gone. A notice only says where to look: the
refresh lists each folder with ripgrep and vets every file as a whole refresh does (``search.listed``), so a
notice about a hidden, ignored, secret or symlinked path adds nothing to the index. Hidden paths (``.git``)
are not even reported, except ripgrep's ignore files (``IGNORE_FILES``), whose change lists the whole tree.
``Notices`` is the other side: the child, and a thread that gathers its lines.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from k3lsp.wire import isolated

log = logging.getLogger(__name__)

QUIET = 0.5  # seconds without a change that end a burst
LONGEST = 30.0  # a burst that goes on longer is reported anyway
MAX_FOLDERS = 256  # a wider burst asks for a whole refresh
IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")  # ripgrep's rules: one changed, the whole tree is listed
NICENESS = 10  # below the server, as the index's build

Folder = tuple[str, bool]  # a workspace-relative folder ("" for the root) and whether its subfolders count


def command(root: Path, ignored: Sequence[Path]) -> list[str]:
    """The watching child's command line."""
    return isolated.python_command("k3lsp.tools.notices", str(root), *map(str, ignored), unbuffered=True)


class Notices:
    """The watching child of one workspace and what it said since the index last took it. Thread-safe."""

    def __init__(self, root: Path, changed: Callable[[], None], ignored: Sequence[Path] = ()) -> None:
        """Watch ``root``, calling ``changed`` after each burst; nothing under the ``ignored`` folders is said (the
        index's own folder: its writes would ask for a refresh that writes it again, for ever)."""
        self.root = root
        self._changed = changed  # called (from the reader thread) after each burst
        self._lock = threading.Lock()
        self._folders: dict[str, bool] = {}
        self._all = False
        self.since: float | None = None  # monotonic time the watch was whole; None: not (yet, or any more)
        self.why = ""  # why there is no watch
        try:
            self._child = subprocess.Popen(
                command(root, [p for p in ignored if p.is_relative_to(root)]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as e:
            self._child = None
            self.why = f"the watch could not start: {e}"
            return
        threading.Thread(target=self._read, name=f"k3lsp-notices {root.name}", daemon=True).start()

    def covers(self, since: float | None) -> bool:
        """Whether the notices say every change since a whole refresh that began at ``since`` (monotonic)."""
        with self._lock:
            return self.since is not None and since is not None and self.since <= since

    def take(self) -> list[Folder] | None:
        """The folders changed since the last take, or None when a burst was too wide to name them: the whole
        tree. Forgotten here (``add`` them back if their refresh fails)."""
        with self._lock:
            folders, wide, self._folders, self._all = sorted(self._folders.items()), self._all, {}, False
        return None if wide else folders

    def add(self, folders: list[Folder]) -> None:
        """Folders to list again: noticed, or given back by a refresh that failed."""
        with self._lock:
            for folder, deep in folders:
                _merge(self._folders, folder, deep)

    def close(self) -> None:
        """End the child (its stdin closed, then killed if it lingers)."""
        if self._child is None:
            return
        self.why = "closed"  # said by whoever closed it: no warning
        with contextlib.suppress(OSError):
            self._child.stdin.close()
        try:
            self._child.wait(2)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()

    def _read(self) -> None:
        for line in self._child.stdout:
            try:
                said = json.loads(line)
                folders = [(str(folder), bool(deep)) for folder, deep in said.get("folders", ())]
            except (ValueError, TypeError, AttributeError):
                continue  # not a line of ours
            self.add(folders)
            with self._lock:
                if "watching" in said:
                    self.since = time.monotonic()
                self._all = self._all or "all" in said
                self.why = str(said.get("unwatched", self.why))
            if folders or "all" in said:
                self._changed()
        with self._lock:
            self.since = None
            closed, self.why = self.why == "closed", self.why or "the watch ended"
        if not closed:
            log.warning("change notices of %s: %s; the index refreshes the whole tree", self.root, self.why)


# --- the child ---------------------------------------------------------------------------------------------


class Burst:
    """The folders one burst of changes touched, as ``Folder``s; fed by watchdog's thread, taken by the main one."""

    def __init__(self, root: str, ignored: Sequence[str] = ()) -> None:
        self.root = root
        self.ignored = tuple(os.path.relpath(p, root).replace(os.sep, "/") for p in ignored)
        self.lock = threading.Lock()
        self.folders: dict[str, bool] = {}
        self.first = self.last = 0.0

    def dispatch(self, event) -> None:  # watchdog's handler interface
        if event.event_type not in ("created", "deleted", "modified", "moved"):
            return  # opened, closed: nothing changed
        if event.is_directory and event.event_type == "modified":
            return  # a folder's own entries changed: its files' events say which
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if not path:
                continue
            raw = os.path.relpath(os.fsdecode(path), self.root).replace(os.sep, "/")
            if any(raw == p or raw.startswith(p + "/") for p in self.ignored):
                continue
            rules = raw.rpartition("/")[2] in IGNORE_FILES  # which files every folder lists may have changed
            rel = _shown(raw)
            if rel is None and not rules:
                continue
            folder, deep = (
                ("", True) if rules else (rel, True) if event.is_directory else (rel.rpartition("/")[0], False)
            )
            with self.lock:
                _merge(self.folders, folder, deep)
                self.last = time.monotonic()
                self.first = self.first or self.last

    def ended(self) -> dict | None:
        """The burst's line when it has ended (or gone on too long), else None."""
        with self.lock:
            now = time.monotonic()
            if not self.folders or (now - self.last < QUIET and now - self.first < LONGEST):
                return None
            folders, self.folders, self.first = self.folders, {}, 0.0
        if len(folders) > MAX_FOLDERS:
            return {"all": f"{len(folders)} folders changed"}
        return {"folders": sorted([folder, deep] for folder, deep in folders.items())}


def _merge(folders: dict[str, bool], folder: str, deep: bool) -> None:
    """A folder added to a set of them: with its subfolders if either said so."""
    folders[folder] = folders.get(folder, False) or deep


def _shown(rel: str) -> str | None:
    """A noticed workspace-relative path, or None outside the root, hidden (as ``confine.hidden``, not imported:
    this child stays light), or the root itself."""
    if rel == "." or any(part.startswith(".") for part in rel.split("/")):
        return None
    return rel


def _say(said: dict) -> None:
    sys.stdout.write(json.dumps(said) + "\n")
    sys.stdout.flush()


def _main(argv: list[str]) -> int:
    """``ROOT [IGNORED...]``: watch ROOT, nothing under the IGNORED folders, until stdin closes."""
    root = str(Path(argv[0]).resolve())
    with contextlib.suppress(AttributeError, OSError):
        os.nice(NICENESS)
    from watchdog import events  # the child's alone: the server never imports watchdog
    from watchdog.observers import Observer

    burst = Burst(root, [str(Path(p).resolve()) for p in argv[1:]])
    observer = Observer()
    changes = [  # not opened, read or closed: every search and index build reads the whole tree
        events.FileCreatedEvent,
        events.FileDeletedEvent,
        events.FileModifiedEvent,
        events.FileMovedEvent,
        events.DirCreatedEvent,
        events.DirDeletedEvent,
        events.DirMovedEvent,
    ]
    try:
        observer.schedule(burst, root, recursive=True, event_filter=changes)
        observer.start()
    except OSError as e:  # ENOSPC: inotify's watch limit
        _say({"unwatched": f"{root} cannot be watched: {e}"})
        return 1
    _say({"watching": True})
    gone = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), gone.set()), daemon=True).start()
    try:
        while not gone.wait(QUIET / 2):
            said = burst.ended()
            if said is not None:
                _say(said)
    except BrokenPipeError:
        pass
    observer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
