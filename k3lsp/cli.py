"""`k3lsp`: with no arguments the language server on stdio; subcommands for scripts and terminals.

Each subcommand lives in its own module; this file only parses arguments and dispatches, so that
starting the language server does not pay for what the batch tools import.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from k3lsp.client import BackendClient, BackendError, ClientOptions, default_endpoint


def _status(args: argparse.Namespace) -> int:
    async def run() -> dict:
        options = ClientOptions(endpoint=args.endpoint, connect_timeout=args.timeout,
                                server_key=args.server_key, client_key=args.client_key)
        async with BackendClient(options) as client:
            return {"welcome": client.welcome, "status": await client.status(args.timeout)}

    try:
        result = asyncio.run(run())
    except BackendError as exc:
        print(f"k3lsp status: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        from k3lsp.report import print_status

        print_status(result["welcome"], result["status"])
    return 0


def _audit(args: argparse.Namespace) -> int:
    from k3lsp import batch, options

    settings = {"endpoint": args.endpoint, "minSeverity": args.min_severity,
                "serverKey": args.server_key and str(args.server_key),
                "clientKey": args.client_key and str(args.client_key)}
    opts, errors = options.parse({k: v for k, v in settings.items() if v is not None})
    if errors:
        print("k3lsp audit: " + "; ".join(errors), file=sys.stderr)
        return batch.EXIT_ERROR
    report = asyncio.run(batch.audit_paths([Path(p) for p in args.paths], opts))
    if args.json:
        batch.print_json(report)
    else:
        batch.print_text(report)
    return report.exit_status()


def _keys(args: argparse.Namespace) -> int:
    from k3lsp import keys

    try:
        directory = (args.dir or keys.default_dir("k3lsp")).expanduser()
        print(keys.init_client(directory, args.name or keys.default_client_name(), force=args.force))
    except keys.KeyFileError as exc:
        print(f"k3lsp keys init: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_key_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server-key", type=Path, help="the daemon's public key file (turns CurveZMQ on)")
    parser.add_argument("--client-key", type=Path, help="this client's secret key file (k3lsp keys init)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="k3lsp", description="k3 security-audit language server and tools")
    sub = parser.add_subparsers(dest="command")

    status = sub.add_parser("status", help="show the audit daemon's model, queue and generation health")
    status.add_argument("--endpoint", default=default_endpoint(), help="daemon endpoint (env K3LSP_ENDPOINT)")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the daemon")
    _add_key_flags(status)
    status.set_defaults(run=_status)

    audit = sub.add_parser("audit", help="audit C files and directories; exit 0 clean, 1 findings, 2 errors")
    audit.add_argument("paths", nargs="+", metavar="FILE_OR_DIR", help="C sources/headers or directories of them")
    audit.add_argument("--endpoint", default=default_endpoint(), help="daemon endpoint (env K3LSP_ENDPOINT)")
    audit.add_argument("--json", action="store_true", help="print JSON (findings, errors, stats) instead of text")
    audit.add_argument("--min-severity", choices=("critical", "high", "medium", "low", "info"), default=None)
    _add_key_flags(audit)
    audit.set_defaults(run=_audit)

    keys = sub.add_parser("keys", help="CurveZMQ keys for talking to a daemon on another machine")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    init = keys_sub.add_parser("init", help="create this client's key pair; prints the public key to hand over")
    init.add_argument("--dir", type=Path, default=None, help="where (default: the user config directory)")
    init.add_argument("--name", default=None, help="file name of the pair (default: user-host)")
    init.add_argument("--force", action="store_true", help="replace an existing key pair")
    init.set_defaults(run=_keys)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is None:
        from k3lsp.server import serve_stdio

        serve_stdio()
        return 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
