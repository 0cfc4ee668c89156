"""A value other than the default for every server setting: what the real-client tests set, all at once, to see
each one reach the server (its status's ``settings``). A key added to the schema fails the check below until it
is given a value here, so no key goes untested in an editor."""

from __future__ import annotations

from k3lsp.core import options

# The connection settings go in initializationOptions only (VS Code: user settings, machine scope).
CONNECTION = {"insecure": True}  # the endpoint is each test's daemon; keys would need a keyed daemon
WORKSPACE = {
    "trigger": "manual",  # no audit starts by itself while the settings are compared
    "minSeverity": "high",
    "maxFileBytes": 4096,
    "include": ["src/**/*.c"],
    "exclude": ["src/vendor/**"],
    "thinkingEffort": "high",
    "maxWorkspaceFiles": 7,
    "askAboveUnits": 50,
    "kernelMacros": {"loops": ["k3_walk_*"]},
    "witnesses": ["cppcheck", "sparse"],
    "witnessSeverity": "hint",
    "refute": True,
    "refuteFrom": "high",
    "showRefuted": True,
    "scope": "changed",
    "baseRef": "main",
    "kconfig": "build/.config",  # a path: a defconfig name comes from initializationOptions only
    "unbuilt": "hide",
}
UNSET = {"serverKey", "clientKey", "endpoint"}  # set by the tests that need them (a keyed or a given daemon)
assert set(CONNECTION) | set(WORKSPACE) | UNSET == {s.key for s in options.SETTINGS}
assert all(WORKSPACE[k] != options.BY_KEY[k].default for k in WORKSPACE)
