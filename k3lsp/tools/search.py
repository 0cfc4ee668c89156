"""Text search over a workspace for the model's `grep` and `find_references`: ripgrep, kept to the sandbox.

ripgrep (the PyPI wheel `ripgrep`, a dependency of the editor side) searches a kernel tree completely in well under
a second: multi-threaded, `.gitignore`-aware, hidden files and symlinks skipped, a regex engine without
backtracking. It runs as a child process with no configuration file (``--no-config``, no RIPGREP_CONFIG_PATH),
the pattern passed with ``-e`` and the paths after ``--`` (no option injection), secret names and places excluded
by globs, files over ``confine.MAX_FILE_BYTES`` skipped, and is killed at the deadline or once enough lines are in.
What it prints is not trusted either: every file a hit comes from is checked again (`confine.vet`, and a NUL
anywhere makes it binary, which ripgrep only notices near the start of a file) before any line is shown.

`git grep` would be the other complete search, but it reads the repository's own configuration
(`core.fsmonitor` and friends run programs), which a hostile repository writes; so without ripgrep the search
falls back to Python's ``re`` in a child process, killed after ``kill_after`` seconds (one line can backtrack for
ever without releasing the GIL), and the answer says which search ran.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import select
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from k3lsp.tools import confine, occurrences
from k3lsp.tools.confine import ToolError
from k3lsp.wire import isolated

MAX_HITS = 2000  # lines collected (then sorted) before the search is stopped as too broad
MAX_LINE_CHARS = 400  # one minified line must not eat the whole answer
SOURCE_GLOBS = ("*.c", "*.h", "*.cc", "*.cpp", "*.cxx", "*.hh", "*.hpp", "*.hxx")  # what the index and references read


@dataclass
class Hit:
    path: str  # workspace-relative, posix
    line: int  # 1-based
    text: str


@dataclass
class Search:
    """What one search found and what it covered."""

    hits: list[Hit] = field(default_factory=list)
    files: int | None = None  # files searched, when the search ran to its end
    seconds: float = 0.0
    stopped: str = ""  # "" (complete), "deadline" or "limit" (MAX_HITS lines)
    engine: str = ""
    mode: str = "regex"
    holding: int | None = None  # a search from the occurrence index: how many files the index says hold the word
    unread: list[str] = field(default_factory=list)  # of those, the ones not read (the answer was full first)

    def coverage(self, deadline: float) -> str:
        """What the search covered, in words the model can act on."""
        if self.holding is not None:
            return self._indexed(deadline)
        if self.stopped == "deadline":
            return (
                f"stopped at the {deadline:g} s deadline before the search was complete, so more may match: "
                "narrow it with path"
            )
        if self.stopped == "limit":
            return f"stopped after {MAX_HITS:,} matching lines: narrow the pattern or the path"
        return f"searched {counted(self.files or 0, 'file')} in {self.seconds:.1f} s"

    def _indexed(self, deadline: float) -> str:
        """What a search from the occurrence index read, and exactly which files it left out."""
        holding = counted(self.holding or 0, "file")
        if not self.unread:
            return f"read the {holding} it names in {self.seconds:.2f} s"
        why = f"the {deadline:g} s deadline" if self.stopped == "deadline" else "enough lines to show"
        folders = Counter(path.split("/", 1)[0] + ("/" if "/" in path else "") for path in self.unread)
        where = ", ".join(f"{name} {n:,}" for name, n in folders.most_common(8))
        return (
            f"read {self.files or 0:,} of the {holding} it names, in path order, and stopped at {why}: "
            f"{counted(len(self.unread), 'file')} not read ({where}{', …' if len(folders) > 8 else ''}), "
            f"from {self.unread[0]} on: narrow with path"
        )


def counted(count: int, noun: str, more: str = "") -> str:
    """ "1 file", "2 files", "45,908 files", "2,000+ lines": counts as the answers say them."""
    return f"{count:,}{more} {noun}{'' if count == 1 and not more else 's'}"


@functools.cache
def ripgrep() -> str | None:
    """The ripgrep beside this Python (the wheel installs it there), else one on PATH, else None."""
    scripts = sysconfig.get_path("scripts")
    return (
        shutil.which("rg", path=scripts)
        or shutil.which("rg", path=str(Path(sys.executable).parent))
        or (shutil.which("rg"))
    )


@functools.cache
def ripgrep_version(rg: str) -> str:
    out = subprocess.run([rg, "--version"], capture_output=True, text=True, timeout=10).stdout
    return out.split("\n", 1)[0].strip() or "ripgrep"


def exclusions(base: Path) -> list[str]:
    """ripgrep globs that keep it out of secret names and the secret places inside the workspace (case-folded:
    the rule is checked by identity again on every hit)."""
    globs = [f"!{name}" for name in confine.SECRET_NAMES]
    for place in confine.secret_places():
        if place.is_relative_to(base) and place != base:
            globs.append(f"!/{place.relative_to(base).as_posix()}")
    return [arg for glob in globs for arg in ("--iglob", glob)]


def source_types() -> list[str]:
    """ripgrep's file-type options for C and C++ sources (types keep .gitignore rules; globs would override them)."""
    return [arg for glob in SOURCE_GLOBS for arg in ("--type-add", f"src:{glob}")] + ["--type", "src"]


def search(
    root: str | os.PathLike[str],
    pattern: str,
    under: Path | None,
    *,
    seconds: float,
    kill_after: float,
    word: bool = False,
    sources: bool = False,
) -> Search:
    """Lines matching ``pattern`` under the real path ``under`` (None: the whole workspace), sorted, each from a
    file the sandbox shows. An invalid regex is searched as a fixed string (and ``mode`` says so)."""
    base = Path(root).resolve()
    target = "." if under is None or under == base else under.relative_to(base).as_posix()
    rg = ripgrep()
    started = time.monotonic()
    if rg is None:
        found = _python(base, pattern, target, seconds, kill_after, word, sources)
    else:
        found = _ripgrep(rg, base, pattern, target, seconds, word, sources)
    found.seconds = time.monotonic() - started
    return _shown(base, found)


def _ripgrep(rg: str, base: Path, pattern: str, target: str, seconds: float, word: bool, sources: bool) -> Search:
    command = [rg, "--no-config", "--stats", "--null", "--line-number", "--with-filename", "--no-heading"]
    command += ["--color", "never", "--no-messages", "--max-filesize", str(confine.MAX_FILE_BYTES), *exclusions(base)]
    command += [*(source_types() if sources else []), *(["--word-regexp"] if word else [])]
    try:
        found = _run_ripgrep([*command, "-e", pattern, "--", target], base, seconds)
    except _BadRegex as e:  # not a regex ripgrep reads: search it as a fixed string, as the model most likely meant
        found = _run_ripgrep([*command, "--fixed-strings", "-e", pattern, "--", target], base, seconds)
        found.mode = f"fixed string (invalid regex: {e})"
    found.engine = ripgrep_version(rg)
    return found


class _BadRegex(Exception):
    """ripgrep could not read the pattern as a regex; the message is its reason."""


_SEARCHED = re.compile(rb"^(\d+) files? searched$")


def _run_ripgrep(command: list[str], base: Path, seconds: float) -> Search:
    """One ripgrep run, its lines (``path NUL line:text``, then the stats) read as they come."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPGREP")}
    deadline = time.monotonic() + seconds
    found = Search()
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            command, cwd=base, stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL, env=env
        )
        assert child.stdout is not None
        try:
            pending = b""
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([child.stdout], [], [], left)[0]:
                    found.stopped = "deadline"
                    break
                chunk = os.read(child.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    _read_line(line, found)
                if len(found.hits) >= MAX_HITS:
                    found.stopped = "limit"
                    del found.hits[MAX_HITS:]
                    break
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        errors.seek(0)
        message = errors.read().decode("utf-8", "replace").strip()
    if found.files is None and not found.stopped:
        if "regex parse error" in message:
            raise _BadRegex(message.rpartition("error:")[2].strip().split("\n")[0] or "not a regex")
        raise ToolError(f"the search failed: {message[-500:] or f'ripgrep exited with {child.returncode}'}")
    return found


def indexed(base: Path, paths: list[str], word: str, seconds: float, enough: int) -> Search:
    """The lines that hold ``word`` as a whole word in ``paths`` (the files the occurrence index names, sorted),
    each file read through the sandbox, until ``enough`` lines are in or ``seconds`` have passed; the files not
    read are listed (``Search.unread``)."""
    started = time.monotonic()
    found = Search(engine="the occurrence index", mode="whole word", holding=len(paths), files=0)
    secrets = confine.Secrets()
    for n, rel in enumerate(paths):
        if len(found.hits) >= enough or time.monotonic() - started > seconds:
            found.stopped = "limit" if len(found.hits) >= enough else "deadline"
            found.unread = paths[n:]
            break
        found.files = n + 1
        try:
            data = confine.read_bytes(confine.resolve(base, rel, secrets), rel)
        except ToolError:
            continue
        found.hits += [Hit(rel, line, text.rstrip("\r")) for line, text in occurrences.lines_with(data, word)]
    del found.hits[MAX_HITS:]
    found.seconds = time.monotonic() - started
    return found


def _read_line(line: bytes, found: Search) -> None:
    """One line of ripgrep's output: a hit (``path NUL number:text``) or one of the closing stats."""
    path, nul, rest = line.partition(b"\0")
    if not nul:
        searched = _SEARCHED.match(line)
        if searched:
            found.files = int(searched.group(1))
        return
    number, colon, text = rest.partition(b":")
    name = _utf8(path)
    if colon and number.isdigit() and name:
        found.hits.append(Hit(name, int(number), text.decode("utf-8", "replace")))


def _python(
    base: Path, pattern: str, target: str, seconds: float, kill_after: float, word: bool, sources: bool
) -> Search:
    """The fallback search in a child process that imports nothing from the workspace (k3lsp.wire.isolated)."""
    request = {"root": str(base), "pattern": pattern, "target": target, "seconds": seconds}
    request |= {"word": word, "sources": sources}
    command = isolated.python_command("k3lsp.tools.search")
    try:
        child = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True, timeout=kill_after)
    except subprocess.TimeoutExpired:  # run() has killed it
        raise ToolError(
            f"the search for {pattern!r} took over {kill_after:g} s and was stopped "
            "(catastrophic backtracking?); use a simpler pattern or a narrower path"
        ) from None
    if child.returncode != 0:
        raise ToolError(f"the search failed: {child.stderr.strip()[-500:]}")
    answer = json.loads(child.stdout)
    hits = [Hit(*hit) for hit in answer["hits"]]
    why = "ripgrep was not found: install k3lsp's dependencies (pip install ripgrep)"
    return Search(
        hits, answer["files"], stopped=answer["stopped"], engine=f"a pure-Python search ({why})", mode=answer["mode"]
    )


def _python_search(root: str, pattern: str, target: str, seconds: float, word: bool, sources: bool) -> dict:
    """The fallback's search itself (in the child): every file under ``target`` the sandbox shows, until the
    deadline (checked between lines) or MAX_HITS lines."""
    mode = "regex"
    try:
        regex = re.compile(pattern)
    except re.error as e:
        regex, mode = re.compile(re.escape(pattern)), f"fixed string (invalid regex: {e})"
    if word:
        regex = re.compile(rf"\b(?:{regex.pattern})\b")
    base = Path(root)
    deadline = time.monotonic() + seconds
    hits: list[list] = []
    files, stopped = 0, ""
    vetter = confine.Vetter(base)
    for rel in walk(base, target, SOURCE_GLOBS if sources else None):
        if time.monotonic() > deadline:
            stopped = "deadline"
            break
        files += 1
        try:
            text = confine.read_text(base / rel, rel) if vetter.vet(rel) else ""
        except (ToolError, OSError):
            continue
        for n, line in enumerate(text.split("\n"), 1):
            if n % 1024 == 0 and time.monotonic() > deadline:
                break
            if regex.search(line[: MAX_LINE_CHARS * 4]):
                hits.append([rel, n, line])
        if len(hits) >= MAX_HITS:
            stopped = "limit"
            del hits[MAX_HITS:]
            break
    return {"hits": hits, "files": None if stopped else files, "stopped": stopped, "mode": mode}


def walk(base: Path, target: str, globs: tuple[str, ...] | None) -> list[str]:
    """Workspace-relative paths of the files under ``target``, sorted, without ripgrep: hidden files and
    directories and symlinks are not walked into (as ripgrep does), and there is no cap. Not yet vetted."""
    start = base / target
    if not start.is_dir():
        return [target]
    out = []
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_dir = Path(dirpath).relative_to(base)
        for name in sorted(filenames):
            if name.startswith(".") or (globs is not None and not any(fnmatch.fnmatch(name, g) for g in globs)):
                continue
            if not Path(dirpath, name).is_symlink():
                out.append((rel_dir / name).as_posix())
    return out


def listed(
    root: str | os.PathLike[str], seconds: float, folder: str = "", *, deep: bool = True
) -> dict[str, os.stat_result]:
    """Every file of the workspace the sandbox shows and a search reads, with its status: what the index
    covers (ripgrep's listing, so .gitignore rules hold there too). ``folder`` (workspace-relative, "" for the
    root): only the files under it, or only its own with ``deep`` false; a folder the sandbox would not show
    (hidden, a secret place, a symlink or below one) or that is gone lists nothing."""
    base = Path(root).resolve()
    if folder and not (confine.Vetter(base).folder(folder) and (base / folder).is_dir()):
        return {}
    start = f"./{folder}" if folder else "."
    rg = ripgrep()
    if rg is None:
        rels = walk(base, start, None)
        rels = rels if deep else [rel for rel in rels if rel.rpartition("/")[0] == folder]
    else:
        command = [rg, "--no-config", "--files", "--null", "--max-filesize", str(confine.MAX_FILE_BYTES)]
        command += [*exclusions(base), *([] if deep else ["--max-depth", "1"]), "--", start]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPGREP")}
        out = subprocess.run(command, cwd=base, capture_output=True, timeout=seconds, env=env, stdin=subprocess.DEVNULL)
        rels = [name.removeprefix("./") for raw in out.stdout.split(b"\0") if (name := _utf8(raw))]
    vetter = confine.Vetter(base)  # made after the listing: a folder swapped for a symlink meanwhile is refused
    return {rel: info for rel in rels if (info := vetter.vet(rel))}


def _utf8(raw: bytes) -> str:
    """A listed name as text; "" for one that is not UTF-8 (no tool could name it to the model)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def _shown(base: Path, found: Search) -> Search:
    """The hits from files the sandbox shows (the rules checked again on each file ripgrep named), sorted.
    What is left out is not counted anywhere: a count would tell the model whether a hidden file matches."""
    vetter = confine.Vetter(base)
    verdicts: dict[str, bool] = {}
    kept = []
    for hit in found.hits:
        if hit.path.startswith("./"):
            hit.path = hit.path[2:]
        if hit.path not in verdicts:
            try:
                verdicts[hit.path] = vetter.vet(hit.path) is not None and b"\0" not in (base / hit.path).read_bytes()
            except OSError:
                verdicts[hit.path] = False
        if verdicts[hit.path]:
            hit.text = hit.text.rstrip("\r\n")
            kept.append(hit)
    found.hits = sorted(kept, key=lambda h: (h.path, h.line))
    return found


def _child() -> None:
    """The child process of the fallback search: a JSON request on stdin, the result as JSON on stdout."""
    request = json.load(sys.stdin)
    json.dump(
        _python_search(
            request["root"],
            request["pattern"],
            request["target"],
            request["seconds"],
            request["word"],
            request["sources"],
        ),
        sys.stdout,
    )


if __name__ == "__main__":
    _child()
