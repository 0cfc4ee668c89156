"""Assistant turns in the canonical Kimi K3 text, for `--script` files.

The text is what the tiny checkpoint's chat template renders for an assistant message with tool calls
(backend/tiny.py), so a scripted turn forced through the engine is also a prefix of the re-rendered
conversation - which is what lets a continuation after a tool result be served from the prompt cache.
"""

import json

OPEN_TOOLS, CLOSE_TOOLS = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
END = "<|close|>message<|sep|>"


def call(name: str, arguments: dict, index: int = 1) -> str:
    """One tool call with a JSON object body (`tojson` of the template = json.dumps, key order kept)."""
    body = json.dumps(arguments, ensure_ascii=False)
    return (f'<|open|>call tool="{name}" index="{index}"<|sep|><|open|>json type="object"<|sep|>{body}'
            "<|close|>json<|sep|><|close|>call<|sep|>")


def turn(*calls: tuple[str, dict], content: str = "") -> str:
    """An assistant turn: prose, then the calls in one tools section, then the end of the message."""
    if not calls:
        return content + END
    return content + OPEN_TOOLS + "".join(call(n, a, i) for i, (n, a) in enumerate(calls, 1)) + CLOSE_TOOLS + END


def finding(**overrides) -> dict:
    """A valid report_finding argument map."""
    return {"cwe": 787, "severity": "high", "title": "Out-of-bounds write", "message": "n is not checked",
            "start_line": 2, "end_line": 3, "trace": [{"line": 1, "note": "n comes from the caller"}]} | overrides
