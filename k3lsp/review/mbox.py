"""The mails of a patch series, as ``git format-patch`` and ``b4 am`` write them, or one bare patch.

A series comes as an mbox (messages separated by ``From `` lines: ``git format-patch --stdout``, ``b4 am``'s
``.mbx``), as one mail (a file of ``git format-patch``), or as a bare diff (``git diff > x.patch``). Each mail
gives its subject (``[PATCH v2 2/3] ...``, what a reply's ``Re:`` quotes), its ``Message-ID`` and
``References`` (what a reply's ``In-Reply-To`` and ``References`` carry), its author and the diff, which is
what follows the commit message: from the first ``diff --git`` line (or the first ``---``/``+++`` pair) to the
end (git apply, and the patch parser, skip the ``-- `` signature after the last hunk). A mail without a diff (the
cover letter, ``[PATCH 0/3]``) is no patch and is left out.

The mails are read as ``git am`` reads them, so that the review reads the diff git applies: an mbox is cut as
``git mailsplit`` cuts it (only at a ``From `` line with a time and a year, so a ``From`` in a commit message
starts no mail; a file that does not start with one is one mail; a line's ``\\r\\n`` end becomes ``\\n``); the
headers end where git mailinfo ends them, and the body is decoded as it decodes it (base64 and quoted-printable
alone). Python's mail parser reads the headers for the subject, ids, author and date only. A mail is refused when
git would read it in a way not followed here: multipart (git applies every part's diff, attachments too) or
``format=flowed`` (git rewraps its lines); so is one with a ``\\r`` in its headers (Python's parser ends a line
there, git does not) or a header over ``MAX_HEADER_BYTES`` (Python decodes one of many RFC 2047 words in
quadratic time).
"""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass
from pathlib import Path, PurePath

from k3lsp.git import patches
from k3lsp.wire import supplied

MAX_MBOX_BYTES = 64 * 1024 * 1024  # a series of hundreds of patches
MAX_HEADER_BYTES = 16384  # a header longer than this is refused before it is decoded
_DIFF_START = re.compile(r"^diff --git |^--- \S.*\n\+\+\+ ", re.M)
_LINE = re.compile(rb"[^\n]*\n|[^\n]+\Z")
_YEAR = re.compile(rb"\s*([+-]?\d+)")
_HEADER_LINE = re.compile(rb">?From |[!-9;-~]*:")  # git's is_rfc2822_header
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_QP_ESCAPE = re.compile(rb"=([0-9A-Fa-f]{2})")


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
    return parse(data, str(path))


def parse(data: bytes, name: str) -> list[Mail]:
    """The patches of ``data`` (a patch, a mail or an mbox), named ``name`` in what is said about them: what
    :func:`read` reads from a file, and ``k3lsp mcp``'s ``review`` from its patch text."""
    top = data.lstrip()  # git am looks past blank lines for a mail's first line
    if top.startswith(b"From ") or (
        re.match(rb"(?:[A-Za-z-]+:.*\r?\n)+\r?\n", top) and re.search(rb"^Subject:", top, re.M)
    ):
        messages = [_parse(name, n, raw) for n, raw in enumerate(split(data), 1)]
    else:
        messages = [Mail(PurePath(name).name, patches.decode(data))]
    found = [m for m in messages if _DIFF_START.search(m.diff)]
    if not found:
        raise patches.PatchError(f"{name}: no patch in it (a unified diff, a mail or an mbox of them)")
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


def _parse(path: str, n: int, raw: bytes) -> Mail:
    """One mail: its diff from the body as git mailinfo reads it (:func:`_cut`, :func:`_decoded`), its subject,
    ids, author and date from Python's parse of its headers."""
    headers, body = _cut(raw)
    head = raw[: len(raw) - len(body)]
    if b"\r" in head:
        raise patches.PatchError(
            f"{path}: mail {n} has a carriage return inside its headers, where git and Python's mail parser read "
            "different headers; remove it (or send the patch with git format-patch)"
        )
    for name, value in headers:
        if len(value) > MAX_HEADER_BYTES:
            raise patches.PatchError(
                f"{path}: mail {n} has a {name} header of {len(value)} bytes, over the {MAX_HEADER_BYTES} that are "
                "read; shorten it"
            )
    kind = _last(headers, "content-type")
    if b"boundary=" in kind:
        raise patches.PatchError(
            f"{path}: mail {n} is multipart, and git applies the diff of every part (attachments too), which this "
            "review does not follow; send the patch inline, as git format-patch writes it without --attach"
        )
    if b"format=flowed" in kind:
        raise patches.PatchError(
            f"{path}: mail {n} is format=flowed, whose lines git rewraps, which this review does not follow; send "
            "the patch as git format-patch writes it"
        )
    msg = email.message_from_bytes(head, policy=email.policy.default)
    refs = tuple(str(msg.get("references", "")).split())
    reply_to = str(msg.get("in-reply-to", "")).strip()
    if reply_to and reply_to not in refs:
        refs += (reply_to,)
    return Mail(
        subject=" ".join(str(msg.get("subject", "")).split()),
        diff=_diff(patches.decode(_decoded(body, _last(headers, "content-transfer-encoding")))),
        message_id=str(msg.get("message-id", "")).strip(),
        references=refs,
        author=" ".join(str(msg.get("from", "")).split()),
        date=str(msg.get("date", "")),
    )


def _cut(raw: bytes) -> tuple[list[tuple[str, bytes]], bytes]:
    """A mail's headers (name, value with its folded lines) and its body, cut where git mailinfo cuts them: at
    the first line that is blank (whitespace alone) or no header, which is the body's first line."""
    headers: list[tuple[str, bytes]] = []
    for match in _LINE.finditer(raw):
        line = match.group()
        if headers and line[:1] in b" \t":
            headers[-1] = (headers[-1][0], headers[-1][1] + line)
        elif not line.strip() or not _HEADER_LINE.match(line):
            return headers, raw[match.start() :]
        else:
            name, _, value = line.partition(b":")
            headers.append((name.decode("latin-1"), value))
    return headers, b""


def _last(headers: list[tuple[str, bytes]], name: str) -> bytes:
    """The value of the last header of that name (git's reading: each one overrides the one before), lower case."""
    return next((value.lower() for key, value in reversed(headers) if key.lower() == name), b"")


def _decoded(body: bytes, encoding: bytes) -> bytes:
    """The body as git mailinfo decodes it, line by line: base64 or quoted-printable when the encoding's value
    holds the word (anywhere in it, as git looks), else as it is (git knows no other: Python's mail parser also
    decodes uuencode, which showed the review another diff than git's)."""
    if b"base64" in encoding:
        decode = _base64
    elif b"quoted-printable" in encoding:
        decode = _quoted_printable
    else:
        return body
    return b"".join(decode(line.split(b"\0", 1)[0]) for line in _LINE.findall(body))


def _base64(line: bytes) -> bytes:
    """git's ``decode_b_segment``: every character outside the alphabet skipped, ``=`` too; a group cut short
    gives the bytes it holds."""
    out = bytearray()
    acc = pos = 0
    for c in line:
        value = _BASE64.find(c)
        if value < 0:
            continue
        if pos == 0:
            acc = value << 2
        elif pos == 1:
            out.append(acc | value >> 4)
            acc = (value & 15) << 4
        elif pos == 2:
            out.append(acc | value >> 2)
            acc = (value & 3) << 6
        else:
            out.append(acc | value)
        pos = (pos + 1) % 4
    return bytes(out)


def _quoted_printable(line: bytes) -> bytes:
    """git's ``decode_q_segment``: ``=`` and two hex digits is that byte, ``=`` at the line's end joins the next
    line, any other ``=`` is itself; trailing white space is kept (Python's decoder drops it)."""
    soft = re.search(rb"=\n?\Z", line)
    kept = line[: soft.start()] if soft else line
    return _QP_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), kept)


def _diff(body: str) -> str:
    start = _DIFF_START.search(body)
    return "" if start is None else body[start.start() :]
