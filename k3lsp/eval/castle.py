"""The CASTLE-C250 dataset (github.com/CASTLE-Benchmark/CASTLE-Benchmark, MIT): read, checked, and blinded.

A test is a small C program with its labels: ``vulnerable``, ``cwe`` (for a safe test too: the CWE it is a
near miss of), ``lines`` (1-based lines of ``code`` where the bug is) and ``description``; the dataset's
``cwes`` map gives each CWE's parents and children, which the scorer accepts as a match. The labels serve the
scorer alone. What the model is given is a :class:`Program`: the code, under a name made from a hash of the code
(CASTLE names its files ``CASTLE-<cwe>-<n>.c``, which would tell the model the answer). The dataset's ``prompt``
(the authors' instructions to the LLMs they tested) is never read: the model gets k3lsp's own audit prompt, as
in every other front end.

The paper's table (TASE 2025, arXiv 2503.09433; CASTLE-Benchmark's README, ``assets/castle-results.png``) is
here as printed, for the report to show beside ours.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k3lsp.wire import supplied

MAX_DATASET_BYTES = 256 * 1024 * 1024  # CASTLE-C250 is ~1 MB; a dataset of many thousand programs fits


class DatasetError(ValueError):
    """The file is not a CASTLE-format dataset; the message says where."""


@dataclass(frozen=True)
class CastleTest:
    """One labelled program: what the scorer knows. Never sent: see :class:`Program`."""

    id: str
    vulnerable: bool
    cwe: int
    lines: tuple[int, ...]
    code: str


@dataclass(frozen=True)
class Program:
    """What the model sees of one test: the code under a name that says nothing about its labels."""

    test_id: str  # for the report only: never part of what is sent
    name: str  # `<hash>.c`
    code: str


@dataclass(frozen=True)
class Dataset:
    """A CASTLE-format dataset: the tests in the file's order (the scorer's Top-25 bonus depends on it)."""

    path: str
    digest: str  # sha256 of the file: the report says exactly which dataset it scored
    name: str
    version: str
    tests: tuple[CastleTest, ...]
    families: dict[int, frozenset[int]]  # a test's CWE -> the CWEs that match it: itself, its children, parents

    def programs(self) -> list[Program]:
        """The tests as the model sees them, in order. A program's name is a hash of its code (CASTLE-C250 has
        two tests with the same code: the second's hash also takes its repeat number)."""
        seen: Counter[str] = Counter()
        out = []
        for test in self.tests:
            repeat = seen[test.code]
            seen[test.code] += 1
            salt = f"{repeat}\0" if repeat else ""
            digest = hashlib.sha256((salt + test.code).encode("utf-8", "surrogateescape")).hexdigest()[:16]
            out.append(Program(test.id, f"{digest}.c", test.code))
        return out

    @property
    def vulnerable(self) -> int:
        return sum(t.vulnerable for t in self.tests)


def load(path: str | Path) -> Dataset:
    """Read and check a CASTLE-format JSON file; raises DatasetError with a clear message for anything wrong."""
    try:
        raw = supplied.read(path, MAX_DATASET_BYTES)  # a file a flag names: it may be /dev/zero or a FIFO
        data = json.loads(raw)
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list) or not data["tests"]:
        raise DatasetError(f"{path}: a CASTLE dataset is an object with a non-empty list 'tests'")
    families = _families(data.get("cwes"), path)
    tests = tuple(_test(t, f"{path}: tests[{i}]") for i, t in enumerate(data["tests"]))
    ids = Counter(t.id for t in tests)
    if (twice := [i for i, n in ids.items() if n > 1]) != []:
        raise DatasetError(f"{path}: test ids must be unique; repeated: {', '.join(twice[:5])}")
    missing = sorted({t.cwe for t in tests} - families.keys())
    if missing:
        raise DatasetError(f"{path}: 'cwes' has no entry for CWE {', '.join(map(str, missing))} (a test's CWE)")
    return Dataset(
        path=str(path),
        digest=hashlib.sha256(raw).hexdigest(),
        name=str(data.get("dataset", "")),
        version=str(data.get("version", "")),
        tests=tests,
        families=families,
    )


def _test(raw: Any, where: str) -> CastleTest:
    if not isinstance(raw, dict):
        raise DatasetError(f"{where}: expected an object")
    test_id, vulnerable, cwe, lines, code = (raw.get(k) for k in ("id", "vulnerable", "cwe", "lines", "code"))
    if not isinstance(test_id, str) or not test_id:
        raise DatasetError(f"{where}: 'id' must be a non-empty string")
    if not isinstance(vulnerable, bool):
        raise DatasetError(f"{where} ({test_id}): 'vulnerable' must be true or false")
    if not _positive(cwe):
        raise DatasetError(f"{where} ({test_id}): 'cwe' must be a positive integer")
    if not isinstance(lines, list) or not all(_positive(n) for n in lines):
        raise DatasetError(f"{where} ({test_id}): 'lines' must be a list of positive line numbers")
    if not isinstance(code, str) or not code.strip():
        raise DatasetError(f"{where} ({test_id}): 'code' must be the program's text")
    return CastleTest(test_id, vulnerable, cwe, tuple(lines), code)


def _families(raw: Any, path: str | Path) -> dict[int, frozenset[int]]:
    """The authors' ``cwe_collection_to_dict``: each CWE with its children and its (direct) parents."""
    if not isinstance(raw, dict):
        raise DatasetError(f"{path}: 'cwes' must map each CWE to its 'parents' and 'children'")
    out: dict[int, frozenset[int]] = {}
    for key, entry in raw.items():
        where = f"{path}: cwes[{key!r}]"
        if not str(key).isdigit() or not isinstance(entry, dict):
            raise DatasetError(f"{where}: expected a CWE number and an object")
        related = [int(key)]
        for side in ("children", "parents"):
            items = entry.get(side, [])
            if not isinstance(items, list) or not all(isinstance(i, dict) and len(i) == 1 for i in items):
                raise DatasetError(f'{where}: \'{side}\' must be a list of {{"<cwe>": "<name>"}} objects')
            for item in items:
                (cwe,) = item
                if not str(cwe).isdigit():
                    raise DatasetError(f"{where}: {side} entry {cwe!r} is not a CWE number")
                related.append(int(cwe))
        out[int(key)] = frozenset(related)
    return out


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# --- the paper's table ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's results table, as printed (its precision, recall and accuracy follow from these)."""

    name: str
    version: str
    kind: str  # "analyzer" | "llm"
    tp: int
    tn: int
    fp: int
    fn: int
    score: int


PAPER_ROWS = (
    PaperRow("ESBMC", "7.8.1", "analyzer", 53, 99, 12, 97, 697),
    PaperRow("CodeQL", "2.20.1", "analyzer", 35, 84, 43, 115, 600),
    PaperRow("Snyk", "1.1295.4", "analyzer", 30, 86, 28, 120, 594),
    PaperRow("GCC -fanalyzer", "13.3.0", "analyzer", 41, 81, 74, 109, 523),
    PaperRow("Semgrep Code", "1.110.0", "analyzer", 26, 76, 76, 124, 486),
    PaperRow("Cppcheck", "2.13.0", "analyzer", 18, 100, 5, 132, 405),
    PaperRow("Clang Analyzer", "18.1.3", "analyzer", 13, 99, 2, 137, 381),
    PaperRow("GPT-o3 Mini", "-", "llm", 121, 61, 72, 29, 955),
    PaperRow("GPT-o1", "-", "llm", 114, 66, 72, 36, 930),
    PaperRow("DeepSeek R1", "-", "llm", 133, 43, 163, 17, 888),
    PaperRow("GPT-4o", "-", "llm", 113, 45, 141, 37, 814),
)
