"""The server's configuration: parsed once into a typed object with defaults (jedi-language-server style).

Settings arrive as free JSON from ``initializationOptions`` and from ``workspace/configuration`` section
``k3lsp``; every editor sends the same keys. A wrong value must never crash the server or silently change
behaviour: each bad key is reported (the server shows the errors with ``window/showMessage``) and its
default is used, while the valid keys still apply.

The connection settings (:data:`CONNECTION`: which daemon gets the code, the keys that say who it is, and
``insecure``) come from ``initializationOptions`` only: what the editor's own configuration starts the server
with. ``workspace/configuration`` carries every scope the editor merges (VS Code answers an item without a
``scopeUri`` with the workspace's ``.vscode/settings.json`` over the user's; Emacs' eglot takes it from
``.dir-locals.el``), so there a repository could send its code to a daemon of its choosing: those keys are
ignored there, and the user is told (:func:`parse_workspace`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from k3lsp.core.client import default_endpoint
from k3lsp.units.kernelc import DEFAULT_MACROS, Macros
from k3lsp.wire.protocol import EFFORTS, SEVERITIES
from k3lsp.witnesses.adapters import ADAPTERS

TRIGGERS = ("save", "open", "manual")
SCOPES = ("all", "changed")  # k3lsp.core.scope  # open = audit on open and on save
# auto: low for what the user waits on (audits on save and open, explain), high for workspace and batch audits
THINKING_EFFORTS = ("auto", *EFFORTS)
DEFAULT_MAX_FILE_BYTES = 1_000_000  # Semgrep's default target cap: larger files are generated code or amalgamations
DEFAULT_INCLUDE = ("**/*.c", "**/*.h")
DEFAULT_EXCLUDE = ("**/.git/**", "**/build/**", "**/node_modules/**")
WITNESS_SEVERITIES = ("error", "warning", "information", "hint")  # how analyzer alerts show before the model's word


@dataclass(frozen=True)
class Options:
    """What the user can configure; field names are the snake_case of the wire keys."""

    endpoint: str = field(default_factory=default_endpoint)  # the first daemon: interactive work goes here
    other_endpoints: tuple[str, ...] = ()  # further daemons (the setting was a list): background work spreads
    server_key: str = ""  # path to the daemon's public CurveZMQ key; empty = no encryption
    client_key: str = ""  # path to this client's secret key file
    insecure: bool = False  # allow a plain tcp endpoint, where nothing proves who the daemon is
    trigger: str = "save"
    min_severity: str = "info"
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    thinking_effort: str = "auto"
    max_workspace_files: int = 0  # a workspace audit's bound on files (open, then newest first); 0: every file
    kernel_macros: Macros = DEFAULT_MACROS  # what the splitter normalises: the built-in table plus kernelMacros
    witnesses: tuple[str, ...] = ()  # analyzers run on save whose alerts are shown and triaged (docs/witnesses.md)
    witness_severity: str = "warning"  # the diagnostic severity of an alert the model has not triaged
    refute: bool = False  # a refutation turn after each audit, for the findings at or above refute_from
    refute_from: str = "medium"
    show_refuted: bool = False  # show refuted findings and alerts (as hints, the reason in the hover)
    scope: str = "all"  # changed: audit and show only what the work tree changed since base_ref (k3lsp.core.scope)
    base_ref: str = ""  # the base of scope changed; "": the merge-base with the branch's upstream, else HEAD

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every configured daemon, the first one first."""
        return (self.endpoint, *self.other_endpoints)

    def only(self, endpoint: str) -> Options:
        """These settings for one daemon of the list (each daemon has its own connection)."""
        return replace(self, endpoint=endpoint, other_endpoints=())

    def effort(self, priority: str) -> str:
        """The thinking effort a request of this priority is sent with (interactive or background)."""
        if self.thinking_effort != "auto":
            return self.thinking_effort
        return "high" if priority == "background" else "low"

    def refute_sent(self) -> str | None:
        """The ``refute_from`` an audit request carries: None when the refutation turn is off."""
        return self.refute_from if self.refute else None

    def variant(self) -> str:
        """How the settings ask beyond the thinking effort, as results are filed (``ResultKey.digest``)."""
        return f"refute={self.refute_from}" if self.refute else ""

    def audits_on_open(self) -> bool:
        return self.trigger == "open"

    def audits_on_save(self) -> bool:
        return self.trigger in ("save", "open")

    def wants(self, relative_path: str) -> bool:
        """Whether a workspace-relative path (``/`` separated) is audited by workspace audits."""
        return _matches(relative_path, self.include) and not _matches(relative_path, self.exclude)


def admitted_files(folder: Path, root: Path, options: Options) -> Iterator[Path]:
    """Files under ``folder`` that include/exclude (relative to ``root``) and maxFileBytes admit, sorted: what
    workspace and batch audits visit. Every one: a bound, where there is one, is the caller's to state."""
    for current, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = Path(current) / name
            with contextlib.suppress(OSError, ValueError):
                rel = path.relative_to(root).as_posix()
                if options.wants(rel) and path.is_file() and path.stat().st_size <= options.max_file_bytes:
                    yield path


def _matches(path: str, globs: tuple[str, ...]) -> bool:
    # fnmatch's `*` crosses `/`, so `**/*.c` matches any depth; `**/` also matches the top level.
    return any(
        fnmatch.fnmatchcase(path, g) or (g.startswith("**/") and fnmatch.fnmatchcase(path, g[3:])) for g in globs
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return value


def _endpoint(value: Any) -> str:
    value = _text(value).strip()
    if not value.startswith(("tcp://", "ipc://")):
        raise ValueError(f"{value!r} is not a ZeroMQ endpoint such as ipc:///path/daemon.sock or tcp://HOST:PORT")
    return value


def _endpoints(value: Any) -> tuple[str, ...]:
    """One endpoint, or a non-empty list of them (duplicates dropped, order kept)."""
    if isinstance(value, str):
        return (_endpoint(value),)
    if not isinstance(value, list | tuple) or not value:
        raise ValueError("expected an endpoint or a non-empty list of endpoints")
    return tuple(dict.fromkeys(_endpoint(v) for v in value))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _choice(choices: tuple[str, ...]):
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    return check


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected 0 or a positive integer, got {value!r}")
    return value


def _globs(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(g, str) and g for g in value):
        raise ValueError("expected a list of glob strings")
    return tuple(value)


def _witnesses(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of witness names")
    unknown = [v for v in value if v not in ADAPTERS]
    if unknown:
        raise ValueError(f"unknown witness {unknown[0]!r} (known: {', '.join(ADAPTERS)})")
    return tuple(dict.fromkeys(value))


_PARSERS = {
    "endpoint": ("endpoint", _endpoints),
    "serverKey": ("server_key", _text),
    "clientKey": ("client_key", _text),
    "insecure": ("insecure", _flag),
    "trigger": ("trigger", _choice(TRIGGERS)),
    "minSeverity": ("min_severity", _choice(SEVERITIES)),
    "maxFileBytes": ("max_file_bytes", _positive_int),
    "include": ("include", _globs),
    "exclude": ("exclude", _globs),
    "thinkingEffort": ("thinking_effort", _choice(THINKING_EFFORTS)),
    "maxWorkspaceFiles": ("max_workspace_files", _count),
    "kernelMacros": ("kernel_macros", Macros.parse),
    "witnesses": ("witnesses", _witnesses),
    "witnessSeverity": ("witness_severity", _choice(WITNESS_SEVERITIES)),
    "refute": ("refute", _flag),
    "refuteFrom": ("refute_from", _choice(SEVERITIES)),
    "showRefuted": ("show_refuted", _flag),
    "scope": ("scope", _choice(SCOPES)),
    "baseRef": ("base_ref", _text),
}


# The settings that choose where the code goes and how the daemon is trusted: from initializationOptions only.
CONNECTION = ("endpoint", "serverKey", "clientKey", "insecure")
_CONNECTION_FIELDS = {"endpoint": ("endpoint", "other_endpoints"), "serverKey": ("server_key",),
                      "clientKey": ("client_key",), "insecure": ("insecure",)}  # fmt: skip


def _section(raw: Any) -> Any:
    """The settings map itself, unwrapped from ``{"k3lsp": {...}}`` (what some clients send)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("k3lsp"), Mapping):
        return raw["k3lsp"]
    return raw


def parse_workspace(raw: Any, initial: Options) -> tuple[Options, list[str]]:
    """A ``workspace/configuration`` answer -> (options, errors): its keys over the defaults, but the connection
    settings as ``initial`` (initializationOptions) has them. A connection setting that the answer sets otherwise
    is ignored and named in an error, which says where it must be set."""
    fields = [f for key in CONNECTION for f in _CONNECTION_FIELDS[key]]
    base = replace(Options(), **{f: getattr(initial, f) for f in fields})
    section = _section(raw)
    if not isinstance(section, Mapping):
        return parse(raw, base)
    options, errors = parse({k: v for k, v in section.items() if k not in CONNECTION}, base)
    asked, _ = parse({k: v for k, v in section.items() if k in CONNECTION}, base)
    ignored = [k for k in CONNECTION if any(getattr(asked, f) != getattr(base, f) for f in _CONNECTION_FIELDS[k])]
    if ignored:
        errors.append(
            f"k3lsp ignored {', '.join(ignored)} from the workspace settings: the daemon's endpoint, its keys and "
            "insecure are read only from the editor's own settings when the server starts (initializationOptions), "
            "so that no repository chooses where its code goes. Set them there (VS Code: user settings; Neovim: "
            "setup{} or init_options) and restart the server."
        )
    return options, errors


def parse(raw: Any, base: Options | None = None) -> tuple[Options, list[str]]:
    """Settings JSON -> (options, errors). Missing or null keys keep ``base`` (or the defaults).

    Accepts either the settings map itself or one wrapped as ``{"k3lsp": {...}}`` (what some clients send
    as initializationOptions). Unknown keys are reported too, since they are usually typos.
    """
    base = base or Options()
    if raw is None:
        return base, []
    raw = _section(raw)
    if not isinstance(raw, Mapping):
        return base, [f"k3lsp settings must be an object, got {type(raw).__name__}; using the defaults"]
    values: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in raw.items():
        if key not in _PARSERS:
            errors.append(f"unknown k3lsp setting {key!r} (known: {', '.join(_PARSERS)})")
            continue
        if value is None:
            continue
        name, check = _PARSERS[key]
        try:
            values[name] = check(value)
        except ValueError as exc:
            errors.append(f"k3lsp setting {key!r}: {exc}; using {getattr(base, name)!r}")
    if "endpoint" in values:
        values["endpoint"], *others = values["endpoint"]
        values["other_endpoints"] = tuple(others)
    return replace(base, **values), errors
