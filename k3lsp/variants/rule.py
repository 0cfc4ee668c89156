"""The model's Coccinelle rule: taken out of its answer, and refused before spatch sees it when it could run code,
read a file, or change how spatch runs.

A semantic patch is a program as much as a pattern: an ``@script:python@`` or ``@script:ocaml@`` rule runs code for
every match, ``@initialize:...@`` and ``@finalize:...@`` run it once, a metavariable's ``script:python(...)``
constraint runs it per binding; ``#include "x.cocci"`` and ``using "x.iso"`` read another file; a ``#spatch`` line
adds command-line options (``--include-headers``, ``--python PROG``); ``virtual`` names select rules with ``-D``.
The model writes the rule, and the model read the repository: a prompt in a comment can make it write any of these.
So none of them is accepted, wherever it appears (a comment included: a rule is refused for a word it did not need
rather than run for one it should not have had), and the words that make a script or read a file are refused alone
(``script``, ``initialize``, ``finalize``, ``python``, ``ocaml``, ``virtual``, and any ``#``): spatch reads a rule
as tokens, so ``@script``, ``:`` and ``python@`` on three lines, or with comments between them, are a script too,
and ``/* */ #include "x.cocci"`` includes as well as a line that starts with it. What is refused is said in one
sentence naming the line, and that sentence goes back to the model as the reason for its next try.
"""

from __future__ import annotations

import re

from k3lsp.wire.protocol import MAX_RULE_CHARS  # what a rule request's tries carry of a rule

# (what, pattern): a construct that runs code, reads a file or sets spatch's options; searched line by line.
FORBIDDEN: tuple[tuple[str, re.Pattern[str]], ...] = (
    # whole words, wherever they are: spatch reads a rule's header as tokens, so "@script", ":" and "python@" on
    # three lines, or with a comment between them, still make a script rule
    ("a script (script:python, script:ocaml) runs code", re.compile(r"\bscript\b", re.IGNORECASE)),
    ("an @initialize or @finalize rule runs code", re.compile(r"\b(initiali[sz]e|finali[sz]e)\b", re.IGNORECASE)),
    ("Python or OCaml code is not allowed", re.compile(r"\b(python|ocaml|coccilib)\b", re.IGNORECASE)),
    ("# (#include, #spatch options) reads a file or sets options", re.compile(r"#")),
    ('"using" reads an isomorphism file', re.compile(r"\busing\b")),
    ('"virtual" rules select code by -D options', re.compile(r"\bvirtual\b")),
    (
        "spatch options are not allowed in a rule",
        re.compile(r"--(include|python|parse-handler|sp-file|iso|macro|file-groups|dir|all-includes|recursive|local-)"),
    ),
)
_FENCE = re.compile(r"```[ \t]*(?:cocci|smpl|coccinelle)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_MARKED = re.compile(r"^[*-]", re.MULTILINE)  # a context (*) or removal (-) line: what spatch reports as a match


class RuleRefused(ValueError):
    """The rule cannot be run; the message is one sentence the user and the model both read."""


def extract(answer: str) -> str:
    """The rule in the model's answer: its first fenced block (```cocci), else the whole answer when it starts
    as a rule does (``@``); raises RuleRefused when there is none."""
    fenced = _FENCE.search(answer)
    if fenced is not None:
        return fenced.group(1).strip() + "\n"
    if answer.lstrip().startswith("@"):
        return answer.strip() + "\n"
    raise RuleRefused("the answer holds no rule: write the semantic patch alone in a ```cocci block")


def refusal(line: str) -> str | None:
    """What one line of a rule could do that refuses it (a construct of :data:`FORBIDDEN`), or None."""
    return next((what for what, pattern in FORBIDDEN if pattern.search(line)), None)


def check(rule: str) -> str:
    """``rule`` if spatch may run it (nothing in it runs code, reads a file or sets options, and it marks what
    it finds with ``*`` or ``-`` lines); raises RuleRefused saying which line is refused and why."""
    if len(rule) > MAX_RULE_CHARS:
        raise RuleRefused(f"the rule is {len(rule):,} characters, over {MAX_RULE_CHARS:,}: write one small rule")
    if "\0" in rule:
        raise RuleRefused("the rule holds a NUL character")
    for number, line in enumerate(rule.splitlines(), 1):
        what = refusal(line)
        if what is not None:
            raise RuleRefused(f"line {number} of the rule ({line.strip()[:80]!r}): {what}; write a rule without it")
    if not _MARKED.search(rule):
        raise RuleRefused("the rule marks no line with * (or -), so spatch would report nothing: mark the lines")
    return rule
