"""Engine hooks (backend/hooks.py) for tests that drive the engine directly: each request's answer, and the
failure of its prefill, registered by request id as the request is made."""

from dataclasses import dataclass, field

from backend.engine import GenRequest
from backend.script import ScriptedFault


@dataclass
class Forced:
    answers: dict[int, list[int]] = field(default_factory=dict)
    faults: dict[int, str] = field(default_factory=dict)

    def request(self, *args, forced=None, fault: str | None = None, **kwargs) -> GenRequest:
        """A GenRequest (its own arguments), forced to generate ``forced`` (then eos) and failing its prefill with
        ``fault``, when given."""
        req = GenRequest(*args, **kwargs)
        if forced is not None:
            self.answers[req.rid] = list(forced)
        if fault is not None:
            self.faults[req.rid] = fault
        return req

    def answer(self, req: GenRequest, tokenizer) -> list[int] | None:
        return self.answers.pop(req.rid, None)  # asked once, when the engine admits the request

    def reading(self, req: GenRequest) -> None:
        if req.rid in self.faults:  # every pass: a request retried alone fails again, alone
            raise ScriptedFault(self.faults[req.rid])
