"""Reading a generated turn as it streams: reasoning, response text and tool-call sections told apart.

The markers are the ones mlx-lm infers for the tokenizer (``TokenizerWrapper.think_start`` / ``think_end``,
``tool_call_start`` / ``tool_call_end`` and ``structural_markers``), and the matching is mlx-lm's own
streaming ``TextStateMachine``: it strips markers from decoded text and holds back text that may still
become one, so a marker split over tokens is never shown in part.

The transition table is ours rather than ``make_text_state_machine``'s, for one reason: there a tool-call
section opened inside the think channel moves to the same ``tool`` state as any other and then back to
``normal``, so its calls would be executed and the rest of the reasoning read as the answer. Here such a
section is a state of its own (``think_tool``) that returns to the think channel, and its calls are never
read as calls. The states:

- ``normal``: the response (the response channel of the Kimi K3 format, or bare assistant text of a
  renderer without one); the structural markers (response tags, end of message) are stripped;
- ``reasoning``: the think channel;
- ``tool``: a tool-call section opened outside the think channel;
- ``think_tool``: a tool-call section opened inside it.

A turn starts in the think channel when the prompt leaves one open (mlx_lm.server decides the same way).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from mlx_lm.generate import TextStateMachine

NORMAL, REASONING, TOOL, THINK_TOOL = "normal", "reasoning", "tool", "think_tool"


@dataclass(frozen=True)
class Markers:
    """The marker strings of one tokenizer (None: it has no such channel)."""

    think: tuple[str, str] | None
    tools: tuple[str, str] | None
    structural: tuple[str, ...] = ()

    @classmethod
    def of(cls, tokenizer) -> Markers:
        think = (tokenizer.think_start, tokenizer.think_end) if tokenizer.has_thinking else None
        tools = (tokenizer.tool_call_start, tokenizer.tool_call_end) if tokenizer.has_tool_calling else None
        return cls(think, tools, tuple(tokenizer.structural_markers or ()))


@functools.cache
def machine(markers: Markers) -> TextStateMachine:
    """The state machine for these markers (built once: the tries are shared, the runtime state is not)."""
    normal: list[tuple[str, str]] = [(m, NORMAL) for m in markers.structural]
    table = {NORMAL: normal}
    if markers.think:
        start, end = markers.think
        normal.append((start, REASONING))
        table[REASONING] = [(end, NORMAL), *((m, REASONING) for m in markers.structural)]
    if markers.tools:
        start, end = markers.tools
        normal.append((start, TOOL))
        table[TOOL] = [(end, NORMAL)]
        if markers.think:
            table[REASONING].append((start, THINK_TOOL))
            table[THINK_TOOL] = [(end, REASONING)]
    return TextStateMachine(table)


def initial_state(tokenizer, prompt: list[int]) -> str:
    """``reasoning`` when the prompt ends inside an open think channel (the generation prompt opened it)."""
    if not tokenizer.has_thinking:
        return NORMAL
    return REASONING if tokenizer.rfind_think_start(prompt) > tokenizer.rfind_think_end(prompt) else NORMAL


@dataclass
class Reader:
    """One generation's text, fed piece by piece: what each channel said so far."""

    markers: Markers
    state: str = NORMAL  # the channel the text is in now
    reasoning: str = ""
    content: str = ""
    sections: list[str] = field(default_factory=list)  # closed tool-call sections outside think (insides)
    think_sections: list[str] = field(default_factory=list)  # tool-call sections written inside think
    section: str = ""  # the inside of the section open now (state tool or think_tool)
    _sm: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._sm = machine(self.markers).make_state(self.state)

    def feed(self, text: str) -> str:
        """Take the next piece of text; returns the response text it released."""
        self._sm, segments = TextStateMachine.split(self._sm, text)
        return self._take(segments)

    def finish(self) -> str:
        """The generation ended: text held back as a possible marker was text after all."""
        self._sm, held, state = TextStateMachine.flush(self._sm)
        return self._take([(state, held)])

    @property
    def open_section(self) -> bool:
        """True while a tool-call section outside think has not been closed."""
        return self.state == TOOL

    def _take(self, segments: list[tuple[str, str]]) -> str:
        released = []
        for state, text in segments:
            if state != self.state:
                if self.state == TOOL:
                    self.sections.append(self.section)
                elif self.state == THINK_TOOL:
                    self.think_sections.append(self.section)
                if state in (TOOL, THINK_TOOL):
                    self.section = ""
                self.state = state
            if state == NORMAL:
                self.content += text
                released.append(text)
            elif state == REASONING:
                self.reasoning += text
            else:
                self.section += text
        return "".join(released)


def reasoning_tokens(tokenizer, tokens: list[int], initial: str) -> int:
    """How many of a generation's ``tokens`` are in the think channel, its markers included (on token ids)."""
    if not tokenizer.has_thinking:
        return 0
    count, i, inside = 0, 0, initial == REASONING
    while i < len(tokens):
        if inside:
            end = tokenizer.find_think_end(tokens, start=i)
            stop = len(tokens) if end < 0 else end + len(tokenizer.think_end_tokens)
            count += stop - i
            i, inside = stop, False
        else:
            start = tokenizer.find_think_start(tokens, start=i)
            if start < 0:
                break
            i, inside = start, True
    return count
