"""The sweep's configurations: `--matrix AXIS=V1,V2`, their product, and a new axis as one entry of settings."""

from __future__ import annotations

import pytest

from k3lsp.core.options import Options
from k3lsp.eval import matrix


def test_no_matrix_is_the_command_lines_own_settings():
    base = Options(thinking_effort="low")
    (only,) = matrix.configurations(base, [])
    assert (only.name, only.settings, only.options) == ("default", {}, base)


def test_effort_values_set_the_thinking_effort_over_the_base():
    base = Options(min_severity="high")
    low, high = matrix.configurations(base, ["effort=low,high"])
    assert (low.name, low.options.thinking_effort, low.options.min_severity) == ("effort=low", "low", "high")
    assert (high.name, high.settings) == ("effort=high", {"thinkingEffort": "high"})


def test_axes_multiply_in_the_order_given_and_a_new_axis_is_one_entry():
    axes = matrix.AXES | {"severity": {"all": {"minSeverity": "info"}, "serious": {"minSeverity": "high"}}}
    confs = matrix.configurations(Options(), ["severity=serious,all", "effort=off,max"], axes)
    assert [c.name for c in confs] == [
        "severity=serious, effort=off", "severity=serious, effort=max", "severity=all, effort=off",
        "severity=all, effort=max",
    ]  # fmt: skip
    assert [(c.options.min_severity, c.options.thinking_effort) for c in confs][1] == ("high", "max")


@pytest.mark.parametrize(
    ("specs", "says"),
    [
        (["effort"], "expected AXIS=V1,V2 with AXIS one of effort"),
        (["speed=fast"], "AXIS one of effort"),
        (["effort=low", "effort=high"], "--matrix effort is given twice"),
        (["effort=low,turbo"], "values are off, low, high, max, not turbo"),
        (["effort=,"], "not -"),
    ],
)
def test_a_bad_matrix_is_refused_with_what_is_known(specs, says):
    with pytest.raises(matrix.MatrixError, match=says):
        matrix.configurations(Options(), specs)


def test_an_axis_whose_settings_the_options_refuse_is_a_clear_error():
    axes = {"broken": {"x": {"thinkingEffort": "turbo"}}}
    with pytest.raises(matrix.MatrixError, match="thinkingEffort"):
        matrix.configurations(Options(), ["broken=x"], axes)


def test_the_witnesses_and_refute_axes_set_the_editors_settings():
    off, cppcheck, every = matrix.configurations(Options(), ["witnesses=off,cppcheck,all"])
    assert (off.options.witnesses, cppcheck.options.witnesses) == ((), ("cppcheck",))
    assert every.options.witnesses == ("cppcheck", "clang", "gcc", "sparse", "coccinelle")
    no, yes = matrix.configurations(Options(refute_from="high"), ["refute=off,on"])
    assert (no.options.refute_sent(), yes.options.refute_sent()) == (None, "high")
