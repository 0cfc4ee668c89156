"""`k3-backend fidelity record | compare`: argument parsing only; the work is in record.py and compare.py.

Both run as one process or under `mlx.launch` like `serve`; only rank 0 writes the BASE and prints.
"""

import argparse
import json
import sys

from backend.fidelity import compare, forward, record, report
from backend.fidelity.record import DEFAULT_CHUNK, DEFAULT_TOP_K, DEFAULT_WINDOW


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.splitlines()[0]
    sub = parser.add_subparsers(dest="fidelity_command", required=True)
    rec = sub.add_parser("record", help="run the reference teacher-forced and store its BASE")
    rec.add_argument("--model", required=True, help="reference checkpoint directory")
    rec.add_argument("--traces", help="a .jsonl trace file or a directory of them (one session per line)")
    rec.add_argument("--corpus", action="append", default=[], help="a directory of source files (repeatable)")
    rec.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="tokens per window (default %(default)s)")
    rec.add_argument(
        "--top-k",
        type=int,
        default=DEFAULT_TOP_K,
        help="reference log-probs kept per token (default %(default)s); see docs/fidelity.md",
    )
    rec.add_argument(
        "--chunk",
        type=int,
        default=DEFAULT_CHUNK,
        help="tokens per forward pass; memory ~ chunk x vocabulary x 16 bytes (default %(default)s)",
    )
    rec.add_argument("-o", "--output", required=True, help="the BASE file to write")
    cmp = sub.add_parser("compare", help="run a candidate on a BASE's tokens and print the tables")
    cmp.add_argument("--model", required=True, help="candidate checkpoint directory")
    cmp.add_argument("--base", required=True, help="a BASE written by `fidelity record`")
    cmp.add_argument("--window", type=int, help="refuse a BASE recorded with another window")
    cmp.add_argument("--json", action="store_true", help="print the report as JSON")
    cmp.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="also sample N sessions and report loop rate and stop-token reliability",
    )
    cmp.add_argument("--max-tokens", type=int, default=512, help="per generated session (default %(default)s)")
    cmp.add_argument("--seed", type=int, default=0, help="first sampling seed for --generate")
    for sub_parser in (rec, cmp):
        sub_parser.add_argument(
            "--trust-remote-code",
            action="store_true",
            help="run the Python code the checkpoint ships (the released tokenizer class)",
        )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except forward.PeerFailed:
        return 2  # rank 0 has printed why


def _run(args: argparse.Namespace) -> int:
    common = {"window": args.window, "trust_remote_code": args.trust_remote_code}  # both commands read them alike
    if args.fidelity_command == "record":
        sources = {"traces": args.traces, "corpora": args.corpus}
        path = record.record(args.model, args.output, **sources, top_k=args.top_k, chunk=args.chunk, **common)
        if path is not None:
            print(f"wrote {path}")
        return 0
    generation = {"generate": args.generate, "max_tokens": args.max_tokens, "seed": args.seed}
    result = compare.compare(args.model, args.base, **generation, **common)
    if result is not None:
        print(json.dumps(result, indent=1) if args.json else report.render(result))
        sys.stdout.flush()
    return 0
