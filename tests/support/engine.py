"""Drive a real `backend.engine.Engine` to completion in tests, with a bound on the steps."""

from dataclasses import dataclass, field

from backend.engine import Engine, Failed, GenEvent


@dataclass
class Outcome:
    """Everything one request produced."""

    text: str = ""
    finish: str | None = None
    stats: dict = field(default_factory=dict)
    events: int = 0
    tokens: list[int] = field(default_factory=list)  # every generated id, from the finish event
    error: Failed | None = None  # why it finished with an error


def drain(engine: Engine, max_steps: int = 2000, on_step=None) -> dict[int, Outcome]:
    """Step until the engine is idle; `on_step(step_no, events)` may submit or cancel in between."""
    out: dict[int, Outcome] = {}
    for n in range(max_steps):
        if not engine.busy():
            return out
        events: list[GenEvent] = engine.step()
        for ev in events:
            o = out.setdefault(ev.rid, Outcome())
            if o.finish is not None:
                raise AssertionError(f"request {ev.rid} got an event after finishing: {ev}")
            o.text += ev.text
            o.events += 1
            if ev.finish is not None:
                o.finish, o.stats, o.tokens, o.error = ev.finish, ev.stats or {}, list(ev.tokens or []), ev.error
        if on_step is not None:
            on_step(n, events)
    raise AssertionError(f"engine still busy after {max_steps} steps")
