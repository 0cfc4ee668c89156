"""Audit-session traces and code corpora, turned into the token windows the fidelity report scores.

A trace file is JSON lines, one session per line, in the daemon's own message format:

    {"id": "optional name", "tools": [optional OpenAI tool schemas], "thinking_effort": "off|low|high|max",
     "messages": [{"role": "system"|"user"|"assistant"|"tool", "content": "...", "reasoning_content": "...",
                   "tool_calls": [{"function": {"name": "...", "arguments": {...} or "json text"}}]}, ...]}

`k3-backend serve --trace-file` writes exactly this (`TraceFile`). Sessions are rendered through the
model's own renderer with the same code as the daemon's prompts (`prompts.template`; the daemon's audit
tools when a session names none; the release's default effort `max` when it names none), because that
token structure is what the pruned build was calibrated on. An assistant's `reasoning_content` is its
think channel, rendered as the renderer renders reasoning in history (the release's Kimi K3 format keeps
it in the think channel). Tool-call arguments given as JSON text are parsed first, as mlx_lm.server does.
Thinking and response markup inside assistant content is kept verbatim: it is what the model generated.

A session longer than the window keeps its LAST `window` tokens, where the assistant's thinking, tool
calls and answers are; spans are classified on the whole session first, so a window that starts inside
a span still labels it right. A corpus is a directory of source files; every file is tokenized as plain
text and cut into consecutive windows.
"""

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.fidelity.spans import OTHER, classify
from backend.prompts import template
from k3lsp.wire.protocol import EFFORTS

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")
TRACES = "traces"  # the corpus name of trace windows


@dataclass
class Window:
    """One scored window: token ids, a span label per token, and the opening prompt for --generate."""

    source: str  # the session id, or "file.jsonl:LINE"; "dir/file.c#N" for corpus windows
    corpus: str  # TRACES or the corpus directory's name
    ids: list[int]
    labels: list[int]
    prompt: list[int]  # system/user opening + generation prompt; empty for corpus windows


class TraceError(ValueError):
    """A trace that cannot be rendered, with the file and line it came from."""


def trace_files(path: str | Path) -> list[Path]:
    """A .jsonl file, or every .jsonl file under a directory, sorted."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.jsonl") if p.is_file())
        if not files:
            raise TraceError(f"{path}: no .jsonl trace files")
        return files
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file or directory")
    return [path]


def read_sessions(path: Path) -> Iterator[tuple[str, dict]]:
    """(source, session) for every non-blank line of a trace file, validated."""
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                source = f"{path.name}:{n}"
                try:
                    session = json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError(f"{source}: not JSON ({e.msg})") from None
                yield source, _check_session(session, source)


def _check_session(session, source: str) -> dict:
    if not isinstance(session, dict) or not isinstance(session.get("messages"), list) or not session["messages"]:
        raise TraceError(f'{source}: a session is an object with a non-empty "messages" list')
    if "tools" in session and not isinstance(session["tools"], list):
        raise TraceError(f'{source}: "tools" must be a list of tool schemas')
    if session.get("thinking_effort", "max") not in EFFORTS:
        raise TraceError(f'{source}: "thinking_effort" must be one of {", ".join(EFFORTS)}')
    messages = [_check_message(m, f"{source}: message {i}") for i, m in enumerate(session["messages"])]
    return {**session, "messages": messages}


def _check_message(m, where: str) -> dict:
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise TraceError(f"{where}: needs a role in {ROLES}")
    if not isinstance(m.get("content", ""), str | None) or not isinstance(m.get("reasoning_content", ""), str):
        raise TraceError(f"{where}: content and reasoning_content must be text")
    calls = m.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TraceError(f"{where}: tool_calls must be a list")
    if not calls:
        return m
    return {**m, "tool_calls": [_check_call(c, f"{where} tool call {j}") for j, c in enumerate(calls)]}


def _check_call(call, where: str) -> dict:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TraceError(f'{where}: needs {{"function": {{"name": ..., "arguments": ...}}}}')
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            raise TraceError(f"{where}: arguments are not JSON ({e.msg})") from None
    if not isinstance(arguments, dict):
        raise TraceError(f"{where}: arguments must be a JSON object")
    return {**call, "function": {**function, "arguments": arguments}}


def session_window(tokenizer, source: str, session: dict, window: int, default_tools: list[dict]) -> Window:
    """Render one session and cut its scored window (the last `window` tokens)."""
    messages, tools = session["messages"], session.get("tools", default_tools)
    effort = session.get("thinking_effort", "max")
    try:
        ids = template(tokenizer, messages, tools, add_generation_prompt=False, effort=effort)
        opening = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        prompt = (
            template(tokenizer, messages[:opening], tools, add_generation_prompt=True, effort=effort) if opening else []
        )
    except Exception as e:  # the template is the model's code; its errors name no trace line
        raise TraceError(f"{source}: the chat template failed: {e}") from e
    labels = classify(tokenizer, ids)
    start = max(0, len(ids) - window)
    return Window(str(session.get("id", source)), TRACES, ids[start:], labels[start:], prompt)


def trace_windows(tokenizer, path: str | Path, window: int, default_tools: list[dict]) -> list[Window]:
    """One window per session of every trace file under `path`."""
    windows = [
        session_window(tokenizer, source, session, window, default_tools)
        for file in trace_files(path)
        for source, session in read_sessions(file)
    ]
    if not windows:
        raise TraceError(f"{path}: no sessions")
    return windows


def corpus_windows(tokenizer, directory: str | Path, window: int) -> list[Window]:
    """Every file under `directory` (UTF-8 text, undecodable bytes replaced), cut into windows of `window`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise TraceError(f"{directory}: a corpus must be a directory of source files")
    windows = []
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        ids = list(tokenizer.encode(file.read_text(encoding="utf-8", errors="replace")))
        name = file.relative_to(directory).as_posix()
        for n, start in enumerate(range(0, max(len(ids) - 1, 0), window)):
            chunk = ids[start : start + window]
            if len(chunk) >= 2:
                windows.append(Window(f"{directory.name}/{name}#{n}", directory.name, chunk, [OTHER] * len(chunk), []))
    if not windows:
        raise TraceError(f"{directory}: no file with at least 2 tokens")
    return windows


class TraceFile:
    """Appends finished conversations to a trace file (`k3-backend serve --trace-file`), one session per line
    in the format above, so `fidelity record --traces` scores the daemon's own sessions: the reasoning kept as
    `reasoning_content`, rendered by the same renderer at the effort the session ran with.

    Created readable by its owner only (the sessions hold source code). A failed write is logged and costs
    that trace only, never the request.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def __call__(self, session: dict) -> None:
        line = (json.dumps(session, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        try:
            with self._lock:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
        except OSError as exc:
            log.warning("cannot append a trace to %s: %s", self.path, exc)
