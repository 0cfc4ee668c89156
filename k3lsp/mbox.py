"""The mails of a patch series, as ``git format-patch`` and ``b4 am`` write them, or one bare patch.

A series comes as an mbox (messages separated by ``From `` lines: ``git format-patch --stdout``, ``b4 am``'s
``.mbx``), as one mail (a file of ``git format-patch``), or as a bare diff (``git diff > x.patch``). Each mail
gives its subject (``[PATCH v2 2/3] ...``, what a reply's ``Re:`` quotes), its ``Message-ID`` and
``References`` (what a reply's ``In-Reply-To`` and ``References`` carry), its author and the diff, which is
what follows the commit message: from the first ``diff --git`` line (or the first ``---``/``+++`` pair), up to
the ``-- `` signature. A mail without a diff (the cover letter, ``[PATCH 0/3]``) is no patch and is left out.
"""

from __future__ import annotations

import email
import email.policy
import mailbox
import re
from dataclasses import dataclass
from pathlib import Path

from k3lsp import patches

_DIFF_START = re.compile(r"^diff --git |^--- \S.*\n\+\+\+ ", re.M)
_SIGNATURE = re.compile(r"^-- \n", re.M)


@dataclass(frozen=True)
class Mail:
    """One patch of a series."""

    subject: str
    diff: str  # the unified diff, without the commit message and the signature
    message_id: str = ""  # with its angle brackets, as the header has it
    references: tuple[str, ...] = ()  # the thread above it, oldest first
    author: str = ""
    date: str = ""


def read(path: Path) -> list[Mail]:
    """The patches of a file, in the file's order; raises patches.PatchError when it holds none."""
    data = path.read_bytes()
    if data.startswith(b"From "):
        box = mailbox.mbox(path, factory=None, create=False)
        try:
            messages = [_parse(m.as_bytes()) for m in box]
        finally:
            box.close()
    elif re.match(rb"(?:[A-Za-z-]+:.*\r?\n)+\r?\n", data) and re.search(rb"^Subject:", data, re.M):
        messages = [_parse(data)]
    else:
        messages = [Mail(path.name, patches.decode(data))]
    found = [m for m in messages if _DIFF_START.search(m.diff)]
    if not found:
        raise patches.PatchError(f"{path}: no patch in it (a unified diff, a mail or an mbox of them)")
    return found


def _parse(raw: bytes) -> Mail:
    msg = email.message_from_bytes(raw, policy=email.policy.default)
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


def _text(part: email.message.Message) -> str:
    """A text part's content as the patch's bytes (no charset guess: patches are compared byte for byte)."""
    if part.get_content_maintype() != "text":
        return ""
    data = part.get_payload(decode=True) or b""
    return patches.decode(data)


def _diff(body: str) -> str:
    start = _DIFF_START.search(body)
    if start is None:
        return ""
    diff = body[start.start() :]
    end = _SIGNATURE.search(diff)
    return diff if end is None else diff[: end.start()]
