"""The mails of a patch series, as ``git format-patch`` and ``b4 am`` write them, or one bare patch.

A series comes as an mbox (messages separated by ``From `` lines: ``git format-patch --stdout``, ``b4 am``'s
``.mbx``), as one mail (a file of ``git format-patch``), or as a bare diff (``git diff > x.patch``). Each mail
gives its subject (``[PATCH v2 2/3] ...``, what a reply's ``Re:`` quotes), its ``Message-ID`` and
``References`` (what a reply's ``In-Reply-To`` and ``References`` carry), its author and the diff, which is
what follows the commit message: from the first ``diff --git`` line (or the first ``---``/``+++`` pair) to the
end (git apply, and the patch parser, skip the ``-- `` signature after the last hunk). A mail without a diff (the
cover letter, ``[PATCH 0/3]``) is no patch and is left out.

The mails are cut as ``git am`` cuts them (``git mailsplit``), so that the review reads the diff git applies: an
mbox splits only at a ``From `` line with a time and a year (a ``From`` in a commit message starts no mail), a
file that does not start with one is one mail, and a line's ``\\r\\n`` end becomes ``\\n``. Python's mail parser
also ends a line at a lone ``\\r``, where git does not: a mail with one in its headers (which could hide a header
from git, or show one only to Python), or in the body of a multipart mail (a part boundary), is refused. So is a
header over ``MAX_HEADER_BYTES``: Python decodes one of many RFC 2047 words in quadratic time.
"""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from k3lsp import patches
from k3lsp.wire import supplied

MAX_MBOX_BYTES = 64 * 1024 * 1024  # a series of hundreds of patches
MAX_HEADER_BYTES = 16384  # a header longer than this is refused before it is decoded
_DIFF_START = re.compile(r"^diff --git |^--- \S.*\n\+\+\+ ", re.M)
_LINE = re.compile(rb"[^\n]*\n|[^\n]+\Z")
_YEAR = re.compile(rb"\s*([+-]?\d+)")
_HEADER = re.compile(rb"^([!-9;-~]+):(.*(?:\n[ \t].*)*)", re.M)  # a header's name and its value, folded lines too


@dataclass(frozen=True)
class Mail:
    """One patch of a series."""

    subject: str
    diff: str  # the unified diff, without the commit message before it
    message_id: str = ""  # with its angle brackets, as the header has it
    references: tuple[str, ...] = ()  # the thread above it, oldest first
    author: str = ""
    date: str = ""


def read(path: Path) -> list[Mail]:
    """The patches of a file, in the file's order; raises patches.PatchError when it holds none, or a mail that
    git and Python would read apart."""
    try:  # a file a flag names: a regular file, bounded, never blocking (k3lsp.wire.supplied)
        data = supplied.read(path, MAX_MBOX_BYTES)
    except OSError as exc:
        raise patches.PatchError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if data.startswith(b"From ") or (
        re.match(rb"(?:[A-Za-z-]+:.*\r?\n)+\r?\n", data) and re.search(rb"^Subject:", data, re.M)
    ):
        messages = [_parse(path, n, raw) for n, raw in enumerate(split(data), 1)]
    else:
        messages = [Mail(path.name, patches.decode(data))]
    found = [m for m in messages if _DIFF_START.search(m.diff)]
    if not found:
        raise patches.PatchError(f"{path}: no patch in it (a unified diff, a mail or an mbox of them)")
    return found


def split(data: bytes) -> list[bytes]:
    """The mails of an mbox as ``git mailsplit`` cuts them (``git am`` without ``--keep-cr``): leading blanks
    skipped, a new mail at each line :func:`_from_line` accepts (none when the first line is not one: a bare
    mail), and ``\\r\\n`` at a line's end made ``\\n``."""
    lines = _LINE.findall(data.lstrip())
    bare = not lines or not _from_line(lines[0])
    mails: list[list[bytes]] = []
    for line in lines:
        if not mails or (not bare and _from_line(line)):
            mails.append([])
        mails[-1].append(line[:-2] + b"\n" if line.endswith(b"\r\n") else line)
    return [b"".join(lines) for lines in mails]


def _from_line(line: bytes) -> bool:
    """git mailsplit's ``is_from_line``: ``From ``, then a time (``hh:mm``, a digit two before) and a year after
    90 following its last colon."""
    colon = line.rfind(b":", 4, len(line) - 2)
    if len(line) < 20 or not line.startswith(b"From ") or colon < 4:
        return False
    if not all(line[i : i + 1].isdigit() for i in (colon - 4, colon - 2, colon - 1, colon + 1, colon + 2)):
        return False
    year = _YEAR.match(line, colon + 3)
    return year is not None and int(year.group(1)) > 90


def _parse(path: Path, n: int, raw: bytes) -> Mail:
    end = raw.find(b"\n\n") + 1 or len(raw)
    head, rest = raw[:end], raw[end:]
    if b"\r" in head:
        raise patches.PatchError(
            f"{path}: mail {n} has a carriage return inside its headers, where git and Python's mail parser read "
            "different headers; remove it (or send the patch with git format-patch)"
        )
    _check_lengths(path, n, ((m.group(1).decode(), len(m.group(2))) for m in _HEADER.finditer(head)))
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    if msg.is_multipart() and b"\r" in rest:
        raise patches.PatchError(
            f"{path}: mail {n} is multipart with a carriage return inside its body, where git and Python's mail "
            "parser find different parts; send the patch inline (git format-patch without --attach)"
        )
    _check_lengths(path, n, ((name, len(value)) for part in msg.walk() for name, value in part.raw_items()))
    body = "".join(_text(part) for part in msg.walk() if not part.is_multipart())
    refs = tuple(str(msg.get("references", "")).split())
    reply_to = str(msg.get("in-reply-to", "")).strip()
    if reply_to and reply_to not in refs:
        refs += (reply_to,)
    return Mail(
        subject=" ".join(str(msg.get("subject", "")).split()),
        diff=_diff(body),
        message_id=str(msg.get("message-id", "")).strip(),
        references=refs,
        author=" ".join(str(msg.get("from", "")).split()),
        date=str(msg.get("date", "")),
    )


def _check_lengths(path: Path, n: int, headers: Iterable[tuple[str, int]]) -> None:
    for name, length in headers:
        if length > MAX_HEADER_BYTES:
            raise patches.PatchError(
                f"{path}: mail {n} has a {name} header of {length} bytes, over the {MAX_HEADER_BYTES} that are "
                "read; shorten it"
            )


def _text(part: email.message.Message) -> str:
    """A text part's content as the patch's bytes (no charset guess: patches are compared byte for byte)."""
    if part.get_content_maintype() != "text":
        return ""
    data = part.get_payload(decode=True) or b""
    return patches.decode(data)


def _diff(body: str) -> str:
    start = _DIFF_START.search(body)
    return "" if start is None else body[start.start() :]
