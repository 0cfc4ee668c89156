"""`k3-backend demo [PATH...]`: the main job end to end, as the README's first command runs it.

Builds the tiny random-weight checkpoint (unless --model or --endpoint is given), starts `k3-backend serve`
on loopback, audits the C files through the real editor-side pipeline (`k3lsp audit`: units, cache, client,
tool answers), prints the daemon's status, and stops the daemon. With the tiny checkpoint the findings are
noise from random weights: the run proves the installation, not the model.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

import platformdirs

from backend import launch
from k3lsp.wire import ending, isolated

NOTICE = (
    "NOTE: this run uses a tiny checkpoint with RANDOM weights, built on this machine. It proves that the\n"
    "      daemon, the audit loop and the editor-side pipeline work end to end; its findings mean nothing.\n"
    "      On a real set-up run the same command with --model PATH_OR_REPO or --endpoint ENDPOINT."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", default=["examples"], help="C files or directories (default: examples)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--model", help="serve this checkpoint instead of the tiny one")
    where.add_argument("--endpoint", help="use a daemon that is already running")
    p.add_argument("--max-tokens", type=int, default=96, help="generation budget per unit for the served model")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let --model run the Python code it ships (the tiny checkpoint's own is always trusted)",
    )


CUT_SHORT_NOTE = (
    'NOTE: on the random-weight checkpoint, units "cut short (length)" are expected: random weights rarely write\n'
    "      the stop token, so each audit ends at its --max-tokens budget. With a real model they are rare."
)


def say(line: str) -> None:
    """A phase line on stdout, at once (the demo runs for minutes: each phase says what it does)."""
    print(line, flush=True)


def _echo(line: str) -> None:
    """A line of the daemon's, from the thread that reads them: a closed stdout ends the demo in its main thread
    (k3lsp.wire.ending), not here."""
    with contextlib.suppress(BrokenPipeError):
        say(f"  {line}")


def tiny_checkpoint() -> Path:
    """The demo's tiny checkpoint, built once into the user cache directory."""
    from backend.tiny import make_tiny

    path = Path(platformdirs.user_cache_dir("k3lsp")) / "tiny-k3"
    if not (path / "config.json").exists():
        say(f"building the tiny kimi_k3 checkpoint in {path} (once: random weights and a tokenizer)")
        make_tiny(path)
    return path


def _k3lsp(*args: str) -> int:
    """`k3lsp ARGS` as a child; interrupted, it gets the signal and ends as it documents (wire/ending)."""
    return ending.wait_child(subprocess.Popen(isolated.python_command("k3lsp", *args)))


def run(args: argparse.Namespace) -> int:
    missing = [path for path in args.paths if not Path(path).exists()]
    for path in missing:  # said before a checkpoint is built or a daemon started for nothing
        print(f"k3-backend demo: {path}: no such file or directory", file=sys.stderr)
    if missing:
        return 2
    if args.endpoint:
        return _audit(args.endpoint, args.paths)
    if not args.model:
        print(NOTICE, flush=True)
    model = args.model or str(tiny_checkpoint())
    say(f"starting k3-backend serve --model {model} on a private socket")
    # Its own private socket (like the default one, in a fresh 0700 directory): a daemon the user runs is untouched.
    with tempfile.TemporaryFile("w+") as log, tempfile.TemporaryDirectory(prefix="k3demo-") as private:
        serve_args = ["--model", model, "--bind", f"ipc://{private}/daemon.sock", "--max-tokens", str(args.max_tokens)]
        if args.trust_remote_code or not args.model:  # the tiny checkpoint's tokenizer class is this package's code
            serve_args.append("--trust-remote-code")
        try:
            proc, endpoint = launch.start(serve_args, stderr=log, echo=_echo)
            say("the daemon is ready")
        except launch.LaunchError as exc:
            log.seek(0)
            print(f"k3-backend demo: {exc}\n{log.read()[-3000:]}", file=sys.stderr)
            return 2
        try:  # random weights rarely reach their stop token: the tiny checkpoint's units are cut short
            return _audit(endpoint, args.paths, allow_incomplete=not args.model)
        finally:
            code = launch.stop(proc)
            say(f"stopped the daemon (exit code {code})")


def _audit(endpoint: str, paths: list[str], *, allow_incomplete: bool = False) -> int:
    say(f"auditing {' '.join(paths)} through {endpoint}")
    audit = _k3lsp("audit", *paths, "--endpoint", endpoint, *(["--allow-incomplete"] if allow_incomplete else []))
    if allow_incomplete:
        say(CUT_SHORT_NOTE)
    say("the daemon's status:")
    status = _k3lsp("status", "--endpoint", endpoint)
    # `k3lsp audit` exits 1 when it has findings: that is a successful demo, not a failure.
    return 2 if audit >= 2 or status else 0
