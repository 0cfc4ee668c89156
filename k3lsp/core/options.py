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
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from k3lsp.core.client import default_endpoint
from k3lsp.kbuild.config import is_defconfig_name
from k3lsp.units.kernelc import DEFAULT_MACROS, Macros
from k3lsp.units.kernelc import KINDS as KINDS_OF_MACROS
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
UNBUILT = ("hide", "hint", "show")  # how findings in code the kconfig does not build show (k3lsp.core.reachability)


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
    ask_above_units: int = 2_000  # a workspace audit estimated at more units asks which code first; 0: never asks
    kernel_macros: Macros = DEFAULT_MACROS  # what the splitter normalises: the built-in table plus kernelMacros
    witnesses: tuple[str, ...] = ()  # analyzers run on save whose alerts are shown and triaged (docs/witnesses.md)
    witness_severity: str = "warning"  # the diagnostic severity of an alert the model has not triaged
    refute: bool = False  # a refutation turn after each audit, for the findings at or above refute_from
    refute_from: str = "medium"
    show_refuted: bool = False  # show refuted findings and alerts (as hints, the reason in the hover)
    scope: str = "all"  # changed: audit and show only what the work tree changed since base_ref (k3lsp.core.scope)
    base_ref: str = ""  # the base of scope changed; "": the merge-base with the branch's upstream, else HEAD
    kconfig: str = ""  # a kernel .config (relative: to the kernel tree's top) or a defconfig name; "": none
    unbuilt: str = "hint"  # findings in code the kconfig does not build: hidden, hints, or shown as they are

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

    def only_built(self) -> bool:
        """Whether a workspace audit, review or batch run leaves out the code the kconfig does not build
        (``unbuilt: hide``, ``--only-built``); an audit on save audits it all the same, the findings hidden."""
        return bool(self.kconfig) and self.unbuilt == "hide"

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


class Partly(ValueError):
    """A value of which the valid part is kept: the message names what was dropped."""

    def __init__(self, message: str, kept: Any):
        super().__init__(message)
        self.kept = kept


def _names(choices: tuple[str, ...]):
    """A list of names out of ``choices``: an unknown one is dropped and named, the others still apply (one
    misspelt witness must not turn every witness off)."""

    def check(value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of names out of {', '.join(choices)}")
        kept = tuple(dict.fromkeys(v for v in value if v in choices))
        unknown = [v for v in value if v not in choices]
        if unknown:
            named = ", ".join(repr(v) for v in unknown)
            raise Partly(f"unknown {named} left out (known: {', '.join(choices)})", kept)
        return kept

    return check


@dataclass(frozen=True)
class Setting:
    """One key of the settings, as every editor declares, checks and documents it (k3lsp.core.schema renders
    VS Code's manifest and Neovim's option table from these; tests check README's table against them)."""

    key: str  # the wire key: camelCase, as initializationOptions and workspace/configuration carry it
    kind: str  # one of KINDS: how the value is checked here, in VS Code's JSON schema and in Neovim's Lua
    describe: str  # one line for the editors' settings pages
    choices: tuple[str, ...] = ()  # the allowed values of a choice, or of each name of a names list
    connection: bool = False  # from initializationOptions only (machine-scoped in VS Code): see CONNECTION

    @property
    def field(self) -> str:
        """The Options field (and Neovim's option name): the snake_case of the key."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.key).lower()

    @property
    def default(self) -> Any:
        """The default as JSON, what an editor shows and may send; an empty endpoint is the server's own
        (K3LSP_ENDPOINT, else the user's daemon socket: computed per user, so no editor can show it)."""
        if self.key == "endpoint":
            return ""
        return shown(self, Options.__dataclass_fields__[self.field].default)

    def check(self, value: Any) -> Any:
        if self.kind == "choice":
            return _choice(self.choices)(value)
        if self.kind == "names":
            return _names(self.choices)(value)
        return _CHECKS[self.kind](value)


_CHECKS = {"endpoints": _endpoints, "text": _text, "flag": _flag, "size": _positive_int, "count": _count,
           "globs": _globs, "macros": Macros.parse}  # fmt: skip
KINDS = (*_CHECKS, "choice", "names")

SETTINGS = (
    Setting("endpoint", "endpoints", "The k3-backend daemon, e.g. tcp://mac-studio:5555 (with keys), or a list "
            "of them (several Mac pairs, the same keys): audits on save go to the first reachable one, workspace "
            "audits spread over all. Empty: K3LSP_ENDPOINT, else the private ipc:// socket of your user's daemon.",
            connection=True),
    Setting("serverKey", "text", "Path of the daemon's public CurveZMQ key file. Empty (with clientKey empty too): "
            "no encryption, for the daemon of your user on this machine.", connection=True),
    Setting("clientKey", "text", "Path of this client's secret CurveZMQ key file (k3lsp keys init); its public "
            "half must be in the daemon's authorized keys. Set both keys or neither.", connection=True),
    Setting("insecure", "flag", "true allows a plain tcp:// endpoint without keys. Nothing proves who answers "
            "there: anyone on this machine or network could pose as the daemon and receive your code.",
            connection=True),
    Setting("trigger", "choice", "When audits run: on save, on open and save, or only by command (manual).",
            TRIGGERS),
    Setting("minSeverity", "choice", "Findings below this severity are not shown.", SEVERITIES),
    Setting("maxFileBytes", "size", "Files larger than this many bytes are not audited."),
    Setting("include", "globs", "Globs, relative to the workspace folder, of the files workspace audits cover."),
    Setting("exclude", "globs", "Globs, relative to the workspace folder, of the files workspace audits skip."),
    Setting("thinkingEffort", "choice", "How long the model thinks: auto is low for audits on save and open and "
            "for explanations, high for workspace audits.", THINKING_EFFORTS),
    Setting("maxWorkspaceFiles", "count", "A workspace audit's bound on files (open ones first, then the most "
            "recently changed); 0 audits every file."),
    Setting("askAboveUnits", "count", "A workspace audit estimated at more units than this says what it will cost "
            "and asks which code to audit first (changed code, built code, the open file's folder, everything); 0 "
            "never asks."),
    Setting("kernelMacros", "macros", 'Kernel macros the C splitter should know, added to its built-in table: '
            '{"loops": [...], "attributes": [...], "statements": [...]} of names, * globs or name().'),
    Setting("witnesses", "names", "Static analyzers run on each save whose alerts show at once and are triaged "
            "by the model.", tuple(ADAPTERS)),
    Setting("witnessSeverity", "choice", "How an alert the model has not triaged shows.", WITNESS_SEVERITIES),
    Setting("refute", "flag", "After each audit, one more turn asking the model to disprove its findings at or "
            "above refuteFrom; refuted ones are hidden."),
    Setting("refuteFrom", "choice", "The lowest severity the refutation turn asks about.", SEVERITIES),
    Setting("showRefuted", "flag", "Show refuted findings and alerts (as hints, the model's reason in the "
            "hover)."),
    Setting("scope", "choice", "changed: audit and show only what the work tree changed since baseRef.", SCOPES),
    Setting("baseRef", "text", "The base of scope changed: a branch, tag or commit; empty: the merge-base of "
            "HEAD with its branch's upstream, else HEAD."),
    Setting("kconfig", "text", "A kernel .config (relative: to the kernel tree's top) or a defconfig name "
            "(x86_64_defconfig, tinyconfig) saying which code is built; empty: none. A defconfig name runs the "
            "tree's Kconfig, so only your user settings may give one."),
    Setting("unbuilt", "choice", "Findings in code the kconfig does not build: hide them, show them as hints "
            "(the reason in the hover), or show them as they are.", UNBUILT),
)  # fmt: skip
BY_KEY = {s.key: s for s in SETTINGS}

# The settings that choose where the code goes and how the daemon is trusted: from initializationOptions only.
CONNECTION = tuple(s.key for s in SETTINGS if s.connection)
_CONNECTION_FIELDS = {"endpoint": ("endpoint", "other_endpoints"), "serverKey": ("server_key",),
                      "clientKey": ("client_key",), "insecure": ("insecure",)}  # fmt: skip


def shown(setting: Setting, value: Any) -> Any:
    """An option's value as the JSON an editor sends for it (tuples as lists, the kernel macro table as the
    entries added to the built-in one)."""
    if setting.kind == "macros":
        return {k: [e for e in getattr(value, k) if e not in getattr(DEFAULT_MACROS, k)] for k in KINDS_OF_MACROS
                if set(getattr(value, k)) - set(getattr(DEFAULT_MACROS, k))}  # fmt: skip
    return list(value) if isinstance(value, tuple) else value


def effective(opts: Options) -> dict[str, Any]:
    """The settings in force, by wire key: what the server's status reports, so an editor (and its tests) can
    see that what the user set arrived."""
    out = {s.key: shown(s, getattr(opts, s.field)) for s in SETTINGS}
    out["endpoint"] = list(opts.endpoints) if opts.other_endpoints else opts.endpoint
    return out


def summary(errors: list[str]) -> str:
    """Every settings problem in one message (one popup, not one per key), each named once."""
    unique = list(dict.fromkeys(errors))
    if len(unique) == 1:
        return unique[0]
    return f"k3lsp: {len(unique)} settings problems; the other settings apply. " + " ".join(
        f"({n}) {e}" for n, e in enumerate(unique, 1)
    )


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
    if is_defconfig_name(options.kconfig) and options.kconfig != initial.kconfig:
        errors.append(
            f"k3lsp ignored kconfig {options.kconfig!r} from the workspace settings: a defconfig name runs the "
            "tree's Kconfig ($(shell,...) included), so only the editor's own settings (initializationOptions) may "
            "give one; the workspace may name a .config file"
        )
        options = replace(options, kconfig=initial.kconfig)
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
        if key not in BY_KEY:
            errors.append(f"unknown k3lsp setting {key!r} (known: {', '.join(BY_KEY)})")
            continue
        if value is None:
            continue
        setting = BY_KEY[key]
        try:
            values[setting.field] = setting.check(value)
        except Partly as exc:
            values[setting.field] = exc.kept
            errors.append(f"k3lsp setting {key!r}: {exc}; using {list(exc.kept)!r}")
        except ValueError as exc:
            errors.append(f"k3lsp setting {key!r}: {exc}; using {getattr(base, setting.field)!r}")
    if "endpoint" in values:
        values["endpoint"], *others = values["endpoint"]
        values["other_endpoints"] = tuple(others)
    return replace(base, **values), errors
