"""The server's settings parser and its priority slots: plain unit tests (no processes needed)."""

from __future__ import annotations

import pytest

from k3lsp.core import options


def test_valid_settings_apply_and_bad_ones_keep_defaults_with_a_message_each():
    opts, errors = options.parse(
        {"endpoint": "tcp://10.0.0.2:6000", "trigger": "never", "maxFileBytes": 0, "minSeverity": "high", "x": 1}
    )
    assert opts.endpoint == "tcp://10.0.0.2:6000" and opts.min_severity == "high"
    assert opts.trigger == "save" and opts.max_file_bytes == options.DEFAULT_MAX_FILE_BYTES
    assert len(errors) == 3
    assert any("'trigger'" in e and "'never'" in e for e in errors)
    assert any("'maxFileBytes'" in e for e in errors) and any("unknown k3lsp setting 'x'" in e for e in errors)


@pytest.mark.parametrize("raw", [None, {}, {"k3lsp": {}}, {"trigger": None}])
def test_missing_settings_keep_the_base(raw):
    base = options.Options(trigger="manual")
    assert options.parse(raw, base) == (base, [])


@pytest.mark.parametrize("raw", ["save", 3, ["a"]])
def test_settings_that_are_not_an_object_are_refused(raw):
    opts, errors = options.parse(raw)
    assert opts == options.Options() and len(errors) == 1


def test_endpoint_default_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("K3LSP_ENDPOINT", "tcp://127.0.0.1:7777")
    assert options.Options().endpoint == "tcp://127.0.0.1:7777"
    assert options.parse({"endpoint": "localhost:1"})[1]  # not a ZeroMQ endpoint


def test_include_and_exclude_globs():
    opts, _ = options.parse({"include": ["src/**/*.c"], "exclude": ["**/gen/**"]})
    assert opts.wants("src/a/b.c") and not opts.wants("lib/b.c") and not opts.wants("src/gen/x.c")
    default = options.Options()
    assert default.wants("a.c") and default.wants("x/y.h") and not default.wants(".git/a.c")
    assert not default.wants("a.py")


def test_triggers():
    assert options.Options(trigger="open").audits_on_open() and options.Options(trigger="open").audits_on_save()
    assert not options.Options(trigger="save").audits_on_open()
    assert not options.Options(trigger="manual").audits_on_save()


def test_thinking_effort_auto_is_low_for_interactive_and_high_for_background_work():
    auto = options.Options()
    assert (auto.effort("interactive"), auto.effort("background")) == ("low", "high")
    chosen, errors = options.parse({"thinkingEffort": "max"})
    assert errors == [] and (chosen.effort("interactive"), chosen.effort("background")) == ("max", "max")
    kept, errors = options.parse({"thinkingEffort": "medium"})
    assert kept.thinking_effort == "auto" and "'thinkingEffort'" in errors[0]
