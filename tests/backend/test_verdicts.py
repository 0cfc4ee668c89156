"""Analyzer alerts triaged by the model, and the refutation turn: scripted turns through a real daemon.

The scripted model confirms one alert and refutes another (``triage_alert``), reports two findings, then, in
the refutation turn the daemon appends to the same conversation, refutes one finding and confirms the other
(``verdict``). The daemon sends each verdict as a ``verdict`` message, counts them in the stats, and the
refutation turn prefills only itself: its prompt starts with everything the conversation had (prompt and
generation), which the engine's continuation cache holds.
"""

from tests.support.daemon import Wire, audit_fields, module_daemon
from tests.support.kimi import finding, turn

ALERTS = [
    {"id": "A1", "tool": "cppcheck", "rule": "doubleFree", "cwe": 415, "line": 3, "message": "freed twice"},
    {"id": "A2", "tool": "clang", "rule": "core.NullDereference", "line": 2, "message": "null dereference"},
]
HIGH = finding(title="Double free", cwe=415, start_line=3, end_line=3)
MEDIUM = finding(title="Unchecked length", cwe=190, severity="medium", start_line=2, end_line=2)
LOW = finding(title="Style", cwe=398, severity="low", start_line=1, end_line=1)


def script() -> list[dict]:
    triage = [
        ("triage_alert", {"id": "A1", "verdict": "confirmed", "reason": "p is freed on line 2 and 3"}),
        ("triage_alert", {"id": "A2", "verdict": "refuted", "reason": "q is checked on line 1"}),
        ("triage_alert", {"id": "A9", "verdict": "refuted", "reason": "no such alert"}),
    ]
    refutation = [
        ("verdict", {"finding": 1, "verdict": "confirmed", "reason": "nothing resets p"}),
        ("verdict", {"finding": 2, "verdict": "refuted", "reason": "n is bounded by the caller"}),
        ("verdict", {"finding": 3, "verdict": "refuted", "reason": "not asked about"}),
    ]
    return [
        {
            "unit": "judged",
            "turns": [
                turn(*triage, ("report_finding", HIGH), ("report_finding", MEDIUM), ("report_finding", LOW)),
                turn(*refutation, content="Checked."),
            ],
        },
        {"unit": "plain", "turns": [turn(("report_finding", HIGH))]},
    ]


daemon = module_daemon(script)
CODE = "int f(int *p)\n{\n\tfree(p);\n\tfree(p);\n}\n"


def verdicts(messages: list[dict]) -> list[tuple[str, str, str]]:
    return [(m["on"], m["ref"], m["verdict"]) for m in messages if m["kind"] == "verdict"]


async def test_alerts_are_triaged_and_findings_refuted_in_a_turn_that_prefills_only_itself(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request(
            "audit", "v1", **audit_fields("judged", code=CODE), alerts=ALERTS, refute_from="medium"
        )
    assert msgs[-1]["kind"] == "done"
    assert verdicts(msgs) == [
        ("alert", "A1", "confirmed"),
        ("alert", "A2", "refuted"),
        ("finding", "1", "confirmed"),
        ("finding", "2", "refuted"),
    ]  # A9 is no alert of the request; finding 3 is low: not asked about
    stats = msgs[-1]["stats"]
    assert (stats["confirmed"], stats["refuted"]) == (1, 1)
    assert (stats["alerts_confirmed"], stats["alerts_refuted"]) == (1, 1)
    assert stats["invalid_tool_calls"] == 2
    assert stats["finish_reason"] == "stop" and stats["refute_finish"] == "stop" and stats["rounds"] == 2
    audit_turn, refutation = stats["turns"]
    assert refutation["cached_tokens"] >= audit_turn["prompt_tokens"] + audit_turn["generated_tokens"]
    assert refutation["prompt_tokens"] - refutation["cached_tokens"] < audit_turn["prompt_tokens"] / 2
    (session,) = daemon.sessions("judged")
    unit_turn = next(m["content"] for m in session["messages"] if "Unit `judged`" in m["content"])
    assert "A1: line 3, cppcheck doubleFree (CWE-415): freed twice" in unit_turn
    asked = session["messages"][-2]
    assert asked["role"] == "user" and "F1: lines 3-3" in asked["content"] and "F2: lines 2-2" in asked["content"]
    assert "F3" not in asked["content"]


async def test_without_refute_from_there_is_no_refutation_turn(daemon):
    async with Wire(daemon.endpoint) as wire:
        msgs = await wire.request("audit", "v2", **audit_fields("plain", code=CODE))
    stats = msgs[-1]["stats"]
    assert stats["rounds"] == 1 and stats["refute_finish"] == "" and verdicts(msgs) == []
