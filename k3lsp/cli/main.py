"""`k3lsp`: with no arguments the language server on stdio; subcommands for scripts and terminals.

Each subcommand lives in its own module; this file only parses arguments and dispatches, so that
starting the language server does not pay for what the batch tools import.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path

from k3lsp.core.client import (
    ENDPOINT_FORMS,
    ClientOptions,
    DaemonClient,
    DaemonError,
    default_endpoint,
    endpoint_problem,
)
from k3lsp.core.options import THINKING_EFFORTS
from k3lsp.eval import command as eval_command
from k3lsp.wire import commandline, ending, sanitize
from k3lsp.wire.protocol import SEVERITIES


def _endpoints(args: argparse.Namespace) -> list[str]:
    """The endpoints given (``--endpoint`` may repeat), in order, without duplicates; the default when none."""
    return list(dict.fromkeys(args.endpoint or [default_endpoint()]))


def _seconds(text: str) -> float:
    """An argparse type: a wait in seconds, above 0 (a negative or NaN wait never ended; argparse exits 2)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return value


def _status(args: argparse.Namespace) -> int:
    from k3lsp import __version__
    from k3lsp.cli.terminal import DaemonStatus, print_status

    async def ask(endpoint: str) -> DaemonStatus:
        options = ClientOptions(
            endpoint=endpoint,
            connect_timeout=args.timeout,
            server_key=args.server_key,
            client_key=args.client_key,
            insecure=args.insecure,
        )
        try:
            async with DaemonClient(options) as client:
                return DaemonStatus(endpoint, client.welcome, await client.status(args.timeout))
        except DaemonError as exc:
            return DaemonStatus(endpoint, error=str(exc))

    async def ask_all() -> list[DaemonStatus]:
        return list(await asyncio.gather(*(ask(e) for e in _endpoints(args))))

    backends = asyncio.run(ask_all())
    for b in backends:
        if b.error is not None:
            print(sanitize.line(f"k3lsp status: {b.error}"), file=sys.stderr)
    answered = [b for b in backends if b.error is None]
    if len(backends) == 1 and not answered:
        return 2
    if args.json:  # one endpoint: its object; several: a list, one object each
        body = [b.to_json() for b in backends]
        print(json.dumps(body[0] if len(body) == 1 else body, indent=2, sort_keys=True))
    else:
        print_status(backends)
        print(f"client: k3lsp {__version__}")  # beside the daemons' `server` row
        print(_witness_line())
    return 0 if len(answered) == len(backends) else 2


def _witnesses() -> dict[str, str]:
    """Each known witness: the version found, or how to install it (docs/witnesses.md)."""
    from k3lsp.witnesses.analyze import available

    return {name: found if isinstance(found, str) else found.version for name, found in available().items()}


def _witness_line() -> str:
    return "witnesses: " + "; ".join(f"{name}: {state}" for name, state in _witnesses().items())


def _list_witnesses(args: argparse.Namespace) -> int:
    print(json.dumps(_witnesses(), indent=2) if args.json else _witness_line())
    return 0


def _audit(args: argparse.Namespace) -> int:
    """`k3lsp audit`; exit 1 means "findings", so an unexpected fault exits 2 (EXIT_ERROR), never 1."""
    from k3lsp.cli import batch

    try:
        return _audit_run(args)
    except BrokenPipeError:
        raise  # a closed stdout: main ends quietly (k3lsp.wire.ending)
    except Exception as exc:
        print(sanitize.line(f"k3lsp audit: error: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return batch.EXIT_ERROR


def _settings(args: argparse.Namespace):
    """What a batch command (``audit``, ``review``, ``eval``) takes from its flags: (options, endpoints, jobs,
    errors)."""
    from k3lsp.core import options
    from k3lsp.core.pool import DEFAULT_SLOTS

    settings = {
        "minSeverity": getattr(args, "min_severity", None),
        "thinkingEffort": args.thinking_effort,
        "serverKey": args.server_key and str(args.server_key),
        "clientKey": args.client_key and str(args.client_key),
        "insecure": args.insecure,
        "witnesses": args.witnesses.split(",") if getattr(args, "witnesses", None) is not None else None,
        "refute": getattr(args, "refute", None),
        "refuteFrom": getattr(args, "refute_from", None),
        "showRefuted": getattr(args, "show_refuted", None),
        "kconfig": _kconfig(kconfig) if (kconfig := getattr(args, "kconfig", None)) else None,  # castle has none
        "unbuilt": "hide" if getattr(args, "only_built", False) else None,
    }
    opts, errors = options.parse({k: v for k, v in settings.items() if v is not None})
    if settings["unbuilt"] and not kconfig:
        errors.append("--only-built needs --kconfig: the .config (or defconfig name) that says what is built")
    endpoints = _endpoints(args)
    if args.endpoint is None:  # K3LSP_ENDPOINT, else this user's socket: said as the variable, not as a flag
        errors += filter(None, map(endpoint_problem, endpoints))
    else:
        errors += [f"--endpoint {e} is not a ZeroMQ endpoint such as {ENDPOINT_FORMS}" for e in endpoints
                   if endpoint_problem(e)]  # fmt: skip
    jobs = getattr(args, "jobs", None)  # eval has no --jobs
    jobs = DEFAULT_SLOTS if jobs is None else jobs
    if jobs < 1:
        errors.append(f"--jobs must be at least 1, not {jobs}")
    return opts, endpoints, jobs, errors


def _kconfig(given: str) -> str:
    """``--kconfig`` as the setting takes it: a defconfig name as given, a path made absolute (the command line's
    is relative to the current directory, the setting's to the kernel tree's top)."""
    from k3lsp.kbuild.config import is_defconfig_name

    return given if is_defconfig_name(given) else str(Path(given).expanduser().absolute())


def _audit_run(args: argparse.Namespace) -> int:
    from k3lsp.cli import batch, terminal

    opts, endpoints, jobs, errors = _settings(args)
    fmt = "json" if args.json else args.format
    if errors:
        print("k3lsp audit: " + "; ".join(errors), file=sys.stderr)
        return batch.EXIT_ERROR

    stop = ending.Stop()  # SIGINT/SIGTERM: finish cleanly, keep what is audited (it is in the cache)
    said: list[batch.Admitted] = []  # what admission said, before the run (a skipped file, the cost)

    def admitted(found: batch.Admitted) -> None:
        batch.print_problems(found, sys.stderr)  # sys.stderr now: the progress bar redirects it
        said.append(found)

    async def run(on_progress) -> batch.BatchReport:
        with stop.catching():
            return await batch.audit_paths(
                [Path(p) for p in args.paths],
                opts,
                endpoints=endpoints,
                jobs=jobs,
                stop=stop.event,
                on_progress=on_progress,
                allow_incomplete=args.allow_incomplete,
                on_admitted=admitted,
            )

    with terminal.progress_bar(sys.stderr.isatty()) as on_progress:
        result = asyncio.run(run(on_progress))
    status = stop.exit_status(result.exit_status()) if result.interrupted else result.exit_status()
    batch.print_problems(result, sys.stderr, said[0] if said else None)
    from k3lsp.cli.sarif import to_sarif

    formats = {
        "sarif": terminal.json_to(lambda: to_sarif(result, status)),
        "json": lambda out: batch.print_json(result, out),
        "text": lambda out: batch.print_text(result, out),
    }
    if not terminal.write_report(args.output, formats, fmt, "audit"):
        return batch.EXIT_ERROR
    if args.output is not None:  # the report went to a file: the terminal still hears what was found
        print(batch.written_summary(result, args.output), file=sys.stderr)
    return status


def _eval(args: argparse.Namespace) -> int:
    """`k3lsp eval castle|fixes` (k3lsp/eval/command.py): every daemon given, background effort high unless told."""
    from dataclasses import replace

    opts, endpoints, _, errors = _settings(args)
    first, *others = endpoints
    return eval_command.run(args, replace(opts, endpoint=first, other_endpoints=tuple(others)), errors)


def _review(args: argparse.Namespace) -> int:
    from k3lsp.review import command as review_cli

    return _front_end("review", args, review_cli.run)


def _variants(args: argparse.Namespace) -> int:
    from k3lsp.variants import command as variants

    return _front_end("variants", args, variants.run)


def _mcp(args: argparse.Namespace) -> int:
    from k3lsp.mcp import server

    return _front_end("mcp", args, server.run)


def _front_end(name: str, args: argparse.Namespace, run: Callable[..., int]) -> int:
    """`k3lsp review` or `variants` (``run(args, options, endpoints, jobs)``); like `audit`, an unexpected fault
    exits 2, never 1."""
    from k3lsp.cli import batch

    try:
        opts, endpoints, jobs, errors = _settings(args)
        if errors:
            print(f"k3lsp {name}: " + "; ".join(errors), file=sys.stderr)
            return batch.EXIT_ERROR
        return run(args, opts, endpoints, jobs)
    except BrokenPipeError:
        raise
    except Exception as exc:
        print(sanitize.line(f"k3lsp {name}: error: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return batch.EXIT_ERROR


def _keys(args: argparse.Namespace) -> int:
    from k3lsp.wire import keys

    try:
        directory = (args.dir or keys.default_dir("k3lsp")).expanduser()
        print(keys.init_client(directory, args.name or keys.default_client_name(), force=args.force))
    except keys.KeyFileError as exc:
        print(f"k3lsp keys init: {exc}", file=sys.stderr)
        return 2
    return 0


EFFORT_HELP = "how long the model thinks per unit (default auto: high, as for workspace audits)"


def _add_effort_flag(parser: argparse.ArgumentParser, default: str | None = None, help: str = EFFORT_HELP) -> None:
    parser.add_argument("--thinking-effort", choices=THINKING_EFFORTS, default=default, help=help)


def _add_finding_flags(parser: argparse.ArgumentParser) -> None:
    """The editor's settings of what an audit sends and shows (README's table), under the same names."""
    parser.add_argument(
        "--witnesses",
        metavar="NAMES",
        help="analyzers whose alerts each unit is sent with, for the model to triage: comma-separated, of "
        "cppcheck, clang, gcc, sparse, coccinelle (the witnesses setting; k3lsp witnesses lists them)",
    )
    parser.add_argument(
        "--refute", action="store_true", default=None, help="one more turn asking the model to disprove its findings"
    )
    parser.add_argument(
        "--refute-from", choices=SEVERITIES, default=None, help="the lowest severity --refute asks about (medium)"
    )
    parser.add_argument(
        "--show-refuted", action="store_true", default=None, help="report refuted findings too (marked refuted)"
    )


ENDPOINT_HELP = "daemon endpoint (default: $K3LSP_ENDPOINT, else this user's private socket)"


def _add_key_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server-key", type=Path, help="the daemon's public key file (turns CurveZMQ on)")
    parser.add_argument("--client-key", type=Path, help="this client's secret key file (k3lsp keys init)")
    parser.add_argument(
        "--insecure", action="store_true", help="allow a plain tcp:// endpoint, where nothing proves who the daemon is"
    )


def _add_run_flags(
    parser: argparse.ArgumentParser, formats: tuple[str, ...], effort: str | None = None, effort_help: str = ""
) -> None:
    """The flags of a command that audits units on daemons and writes a report (``audit``, ``review``): how it is
    written, whether a unit cut short fails it, and :func:`_add_audit_flags`."""
    parser.add_argument("--format", choices=formats, default="text", help="output format")
    parser.add_argument("--json", action="store_true", help="same as --format json")
    parser.add_argument(
        "-o", "--output", type=Path, default=None, help="write the report to this file (default: stdout)"
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="a unit whose audit was cut short (length, budget, loop, deadline) is a warning, not an "
        "error: the exit status says findings or clean",
    )
    _add_audit_flags(parser, effort, effort_help)


def _add_audit_flags(parser: argparse.ArgumentParser, effort: str | None = None, effort_help: str = "") -> None:
    """The flags of a command that audits units (``audit``, ``review``, ``mcp``): units in flight, what is
    reported, and :func:`_add_settings_flags`."""
    parser.add_argument(
        "--jobs", type=int, default=None, help="units in flight per daemon (default 4: the daemon batches them)"
    )
    parser.add_argument(
        "--min-severity", choices=SEVERITIES, default=None, help="report findings at or above (default info: all)"
    )
    _add_settings_flags(parser, effort, effort_help)


def _add_settings_flags(
    parser: argparse.ArgumentParser, effort: str | None = None, effort_help: str = "", kconfig: bool = True
) -> None:
    """The flags of every command whose units go to daemons through the audit service (``audit``, ``review``,
    ``mcp``, ``eval``): which daemons, how long the model thinks, the editor's settings, the keys. ``kconfig``
    False leaves out :func:`_add_kconfig_flags` where the code is no kernel tree (CASTLE's cases): a flag there
    would be accepted and do nothing."""
    parser.add_argument(
        "--endpoint", action="append", help=ENDPOINT_HELP + "; repeat it to spread the units over several"
    )
    _add_effort_flag(parser, effort, effort_help or EFFORT_HELP)
    _add_finding_flags(parser)
    if kconfig:
        _add_kconfig_flags(parser)
    _add_key_flags(parser)


def _add_kconfig_flags(parser: argparse.ArgumentParser) -> None:
    """The kconfig setting and ``unbuilt: hide`` (docs/kernel.md), under the names of the command line."""
    parser.add_argument(
        "--kconfig",
        metavar="CONFIG",
        default=None,
        help="a kernel .config, or a defconfig name made with the tree's Kconfig (x86_64_defconfig, tinyconfig): "
        "each unit's state (built-in, module, not built and why, unknown), built code audited first",
    )
    parser.add_argument(
        "--only-built", action="store_true", help="with --kconfig: skip the units the configuration does not build"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = commandline.Parser(prog="k3lsp", description="k3 security-audit language server and tools")
    commandline.add_version_and_completion(parser)
    sub = parser.add_subparsers(dest="command")

    status = sub.add_parser("status", help="show the audit daemon's model, queue and generation health")
    status.add_argument("--endpoint", action="append", help=ENDPOINT_HELP + "; repeatable")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--timeout", type=_seconds, default=5.0, help="seconds to wait for the daemon")
    _add_key_flags(status)
    status.set_defaults(run=_status)

    witnesses = sub.add_parser("witnesses", help="list the static analyzers found here (the witnesses setting)")
    witnesses.add_argument("--json", action="store_true", help="print JSON: name -> version, or the install hint")
    witnesses.set_defaults(run=_list_witnesses)

    audit = sub.add_parser("audit", help="audit C files and directories; exit 0 clean, 1 findings, 2 errors")
    audit.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="C sources/headers or directories of them")
    _add_run_flags(audit, ("text", "json", "sarif"))
    audit.set_defaults(run=_audit)

    review = sub.add_parser(
        "review",
        help="review patches: a range A..B, a commit, --staged, the work tree, or --patch FILE (a patch or an "
        "mbox); exit 0 clean, 1 an introduced finding at or above --fail-on, 2 errors",
    )
    review.add_argument(
        "revision", nargs="?", default=None, help="A..B (each commit of the range, oldest first) or one commit"
    )
    review.add_argument(
        "-C",
        dest="repo",
        type=Path,
        default=Path("."),
        help="the repository (default: %(default)s, the current directory)",
    )
    what = review.add_mutually_exclusive_group()
    what.add_argument("--staged", action="store_true", help="the index against HEAD")
    what.add_argument(
        "--patch", type=Path, default=None, help="a patch file or an mbox of a series (git format-patch, b4 am)"
    )
    review.add_argument(
        "--base", default=None, help="what the work tree is compared with, or the patches apply to (default HEAD)"
    )
    review.add_argument("--callers", action="store_true", help="also audit the callers of changed functions")
    review.add_argument(
        "--sarif-runs", choices=("patch", "range"), default="patch", help="one SARIF run per patch, or one"
    )
    review.add_argument(
        "--fail-on", choices=SEVERITIES, default="info", help="exit 1 for an introduced finding at or above"
    )
    _add_run_flags(
        review,
        ("text", "json", "sarif", "email"),
        "high",
        "how long the model thinks per unit (default high: a review is read closely)",
    )
    review.set_defaults(run=_review)

    variants = sub.add_parser(
        "variants",
        help="find the variants of a finding across its workspace: the model writes a Coccinelle rule, spatch "
        "searches, the model triages each match; exit 0 none confirmed, 1 variants confirmed, 2 errors",
    )
    from k3lsp.variants.command import add_arguments as variant_arguments

    variant_arguments(variants)
    variants.add_argument("--endpoint", action="append", help=ENDPOINT_HELP + "; repeatable")
    _add_effort_flag(variants, "high", "how long the model thinks on the rule and each candidate (default high)")
    _add_kconfig_flags(variants)
    _add_key_flags(variants)
    variants.set_defaults(run=_variants)

    mcp = sub.add_parser(
        "mcp", help="serve the audits to coding agents: a Model Context Protocol server on stdio (docs/agents.md)"
    )
    mcp.add_argument("--root", type=Path, default=None, help="the workspace folder (default: the current directory)")
    _add_audit_flags(mcp, None, "how long the model thinks per unit (default auto: low, as on save)")
    mcp.set_defaults(run=_mcp)

    evaluate = sub.add_parser("eval", help="measure the audits: CASTLE-C250, or a project's Fixes: history")
    modes = evaluate.add_subparsers(dest="eval_command", required=True)
    castle = modes.add_parser("castle", help="score the audits on CASTLE-C250 as its authors score tools")
    fixes = modes.add_parser("fixes", help="did the review of each commit a Fixes: tag names catch its bug?")
    eval_command.add_arguments(castle, fixes)
    for mode in (castle, fixes):
        _add_settings_flags(mode, kconfig=mode is fixes)  # fixes reviews a kernel's commits; CASTLE's cases are none
        mode.set_defaults(run=_eval)

    keys = sub.add_parser("keys", help="CurveZMQ keys for talking to a daemon on another machine")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    init = keys_sub.add_parser("init", help="create this client's key pair; prints the public key to hand over")
    init.add_argument("--dir", type=Path, default=None, help="where (default: the user config directory)")
    init.add_argument("--name", default=None, help="file name of the pair (default: user-host)")
    init.add_argument("--force", action="store_true", help="replace an existing key pair")
    init.set_defaults(run=_keys)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every command, the language server included, ends on a signal or a closed stdout as docs/cli.md says."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    return ending.run("k3lsp" if command is None else f"k3lsp {command}", lambda: _main(argv))


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv  # the command line, for reports that record it
    if args.command is None:
        from k3lsp.lsp.server import serve_stdio

        with ending.remembered():  # pygls ends quietly on KeyboardInterrupt: the signal still counts
            serve_stdio()
        return 0
    sanitize.log_to_stderr("%(message)s", logging.WARNING)  # what Python prints unconfigured, sanitised
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
