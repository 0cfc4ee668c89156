"""The one sanitiser for text from the model or the daemon, on every way it goes out to a person.

A finding's title, message and trace, an explanation, the daemon's welcome, errors and status are data
that neither side can vouch for (the model follows what the audited code says; the daemon may be someone
else's). Shown raw, such text acts instead of reading:

- C0 and C1 control characters are terminal commands: ``ESC ] 0`` sets the window title, ``ESC ] 52``
  writes the clipboard, ``ESC [`` recolours, hides or erases text, a bare ``CR`` overwrites the line;
  editors show them as bare boxes or break the line there;
- Unicode bidi controls (U+202A-U+202E, U+2066-U+2069, U+200E/F, U+061C) reorder what is shown, so the
  text reads otherwise than it is (Trojan Source);
- invisible characters (zero-width spaces and joiners, soft hyphens, variation selectors, tag characters:
  Unicode's default-ignorable code points) hide text from the reader, or split a word a filter looks for;
- rich markup (``[link=...]``) in a string printed through rich becomes a hyperlink or a style;
- link syntax becomes a link that runs something on a click: VS Code renders ``[text](command:...)`` in a
  notification (``window/showMessage``) as a link and opens it with commands allowed, Markdown (hovers)
  makes links, images and HTML of ``[x](y)``, ``[x][1]`` + ``[1]: y``, ``<scheme:...>``, ``<a href>``, bare
  ``https://`` and ``www.`` addresses, and SARIF viewers make links of ``[text](target)`` in plain text.

So: :func:`line` for one-line text (titles, labels, status, log lines), :func:`text` for messages that
keep their line breaks; both also break the one link form that plain text has (``](`` becomes ``] (``) and
angle-bracket autolinks, so no notification, title or status line can carry a link. :func:`markdown` for
model text inside Markdown (every ASCII punctuation character backslash-escaped: no Markdown construct can
start, no URI can be recognised), :func:`sarif` for SARIF's plain-text messages (brackets escaped as the
SARIF spec says), :func:`unsafe_code` to refuse a suggested fix that hides such characters in code,
:func:`rich` for table cells (data, never markup), and :class:`Formatter` for log lines on a terminal.
JSON and SARIF output escape every control character themselves (``json.dumps``), and what they carry
went through :func:`line` / :func:`text` in ``k3lsp.findings.model`` already.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from rich.text import Text

BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt), as a character class: shown as nothing.
INVISIBLE = (
    "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_BREAKS = re.compile("\r\n|[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # what terminals or editors break lines on
_DROPPED = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}{INVISIBLE}]")  # every control but tab and newline
_UNSAFE_IN_CODE = re.compile(f"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f{BIDI_CONTROLS}{INVISIBLE}]")  # tab, LF, FF, CR are C
# `](`: the only link in plain text (VS Code's notifications, SARIF's embedded links, Markdown inline links);
# `<scheme:...>`: a Markdown autolink, for viewers that render plain text as Markdown.
_LINK = re.compile(r"\](?=\()|<(?=[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*>)")
_MARKDOWN_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character: CommonMark escapes them all
_SARIF_SPECIAL = re.compile(r"([\\\[\]])")


def _unlinked(value: str) -> str:
    return _LINK.sub(lambda m: m.group() + " ", value)


def line(value: object) -> str:
    """One line: line breaks and tabs become spaces, other controls, bidi controls and invisible characters go,
    whitespace collapses, and no link syntax is left."""
    return _unlinked(" ".join(_DROPPED.sub("", _BREAKS.sub(" ", str(value))).split()))


def text(value: object) -> str:
    """Lines kept (any line break becomes ``\\n``) and tabs; every other control, bidi control and invisible
    character goes, and no link syntax is left."""
    return _unlinked(_DROPPED.sub("", _BREAKS.sub("\n", str(value))))


def markdown(value: object) -> str:
    """:func:`text` to put in Markdown as literal text: every ASCII punctuation character backslash-escaped, so
    no link, image, autolink, HTML, entity, code span or emphasis can start, and no linkifier finds a URI
    (``https\\:\\/\\/``, ``www\\.``, ``a\\@b``). A renderer shows the text as it was."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text(value))


def sarif(value: object) -> str:
    """:func:`text` for a SARIF plain-text message: brackets and backslashes escaped with a backslash (SARIF
    2.1.0, 3.11.6: a literal bracket in a plain-text message is escaped, else ``[text](target)`` is a link)."""
    return _SARIF_SPECIAL.sub(r"\\\1", text(value))


def unsafe_code(code: str) -> bool:
    """True when code (a suggested fix) holds a bidi control or a control character other than tab, newline,
    carriage return and form feed: a replacement that would read otherwise than it compiles."""
    return _UNSAFE_IN_CODE.search(code) is not None


def data(value: Any) -> Any:
    """Every string in a map or list (keys too) through :func:`line`: a daemon's free-form answer to show."""
    if isinstance(value, dict):
        return {line(k): data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [data(v) for v in value]
    return line(value) if isinstance(value, str) else value


def rich(value: object) -> Text:
    """A rich table cell showing ``value`` as plain text: its brackets are never read as markup."""
    return Text(line(value))


_ESCAPED = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{BIDI_CONTROLS}]")  # every control, line break and tab
TRACE_GUTTER = "  | "  # before every line of a traceback in a log


def escaped(value: object) -> str:
    """``value`` as one line of a log: every control character (line breaks and tabs too), line and paragraph
    separator and bidi control written as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``). Text from a
    client or the model can then neither start a line of its own (a forged record, or a forged launcher line
    such as "Node with rank 0 exited with code 0") nor act on the terminal that shows the log."""
    return _ESCAPED.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(value))


class Formatter(logging.Formatter):
    """The one formatter of every log the daemon and the editor side write (``log_to_stderr``), whose records
    may quote clients, the model or a daemon: a record's message, its arguments in it, is one line
    (:func:`escaped`); a traceback after it keeps its lines, each escaped the same way behind
    ``TRACE_GUTTER``, so a line break inside an exception's message starts no record either."""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = None  # a traceback another formatter kept on the record is formatted here again
        return super().format(record)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escaped(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:
        return _guttered(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _guttered(super().formatStack(stack_info))


def _guttered(lines: str) -> str:
    return "\n".join(TRACE_GUTTER + escaped(line) for line in lines.splitlines())


def log_to_stderr(fmt: str, level: int = logging.INFO) -> None:
    """``logging.basicConfig`` on stderr with the sanitising :class:`Formatter`."""
    handler = logging.StreamHandler()
    handler.setFormatter(Formatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])
