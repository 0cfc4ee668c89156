"""What the editor side does with each error code follows k3lsp.wire.protocol.ErrorCode: retry, whole-daemon state."""

import pytest

from k3lsp.core.request import concerns_daemon
from k3lsp.wire.protocol import CodeKind, ErrorCode, kind_of, state_for


@pytest.mark.parametrize(
    ("code", "retry", "daemon", "state"),
    [
        ("busy", True, True, "down"),
        ("loading", True, True, "loading"),
        ("load_failed", True, True, "down"),
        ("rank_failure", True, True, "down"),
        ("too_long", False, False, "down"),
        ("cancelled", False, False, "down"),
        ("version", False, True, "down"),
        ("insecure", False, True, "down"),
        ("server_key", False, True, "unauthorized"),
        ("keys", False, True, "unauthorized"),
        ("a_newer_daemons_code", False, False, "down"),  # unknown: this one request fails, nothing more
    ],
)
def test_each_code_is_handled_by_its_kind(code, retry, daemon, state):
    retried = kind_of(code) is CodeKind.TRANSIENT
    assert (retried, concerns_daemon(code), state_for(code)) == (retry, daemon, state)


def test_codes_travel_as_plain_strings():
    assert ErrorCode("busy") is ErrorCode.BUSY and ErrorCode.BUSY == "busy" and f"{ErrorCode.BUSY}" == "busy"
    assert ErrorCode.of("nope") is None and ErrorCode.of("set-up") is None and CodeKind("set-up") is CodeKind.SETUP
