"""Shared test setup: one mlx kernel cache for every test process, session-built tiny checkpoints, the tiers'
markers and the hypothesis profiles.

mlx on CPU JIT-compiles kernels with g++ into $TMPDIR/mlx (about 18 s cold). All tests, and the
daemons and ranks they start (which inherit the environment), share <repo>/.cache/tmp so that cost
is paid once per machine, not once per process.

Markers (CONTRIBUTING.md lists the tiers): ``daemon``, ``pair`` and ``editors`` are given here by directory and
by fixture, so that no test can forget its own; ``logic`` marks every test on the fake auditor (the ``fake``
fixture); ``fuzz`` marks every hypothesis test. Every test fails when asyncio reports the failure of a task that
nobody awaited (``lost_task_failures``): such a failure is seen only when the task is collected, long after it
mattered.
"""

import gc
import importlib.util
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings

REPO = Path(__file__).resolve().parent.parent
MLX_TMPDIR = REPO / ".cache" / "tmp"
MLX_TMPDIR.mkdir(parents=True, exist_ok=True)
os.environ["TMPDIR"] = str(MLX_TMPDIR)
# Daemons started by tests keep no result store unless a test gives one (serving(store=True)): a result kept
# by one test's daemon must not answer another's, nor land in the user's cache directory.
os.environ["K3_BACKEND_STORE"] = "none"

PRUNE_KEEP = [0, 2, 3, 5, 7]  # 5 of the tiny model's 8 experts
# The tests' checkpoint has one layer fewer than make-tiny's 4: KDA with the dense MLP, KDA with the MoE, MLA with
# the MoE (every kind of layer, two attention-residual blocks) for two thirds of the compute per token. The
# daemons' forward passes are the largest share of the suite's CPU (issue 40: the suite on 2 cores).
TINY_LAYERS = 3

# CI runs the same examples on every run (a failure there reproduces) and tolerates a loaded machine;
# elsewhere each run draws new ones. HYPOTHESIS_PROFILE picks one by name.
settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev"))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores this process may run on. A third of a worker's time is spent
    waiting on the processes its tests start (daemons, language servers, editors): on 2 cores, tests/lsp took 228 s
    with two workers (25 % of the CPU idle) and 197 s with three (12 %)."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


TIERS = {"daemon": ("backend", "fidelity"), "pair": ("pair",), "editors": ("editors",)}  # marker -> test directories
CHECKPOINT_FIXTURES = {"tiny_model", "jinja_model", "checkpoint", "pruned_model"}  # each needs mlx
FAKE_FIXTURE = "fake"  # tests/lsp/conftest.py: the language server on the fake auditor
# Where mlx is not installed (the editor side alone), the directories whose every test needs it are not collected.
MLX = importlib.util.find_spec("mlx") is not None
collect_ignore = [] if MLX else [*TIERS["daemon"], *TIERS["pair"]]


def pytest_report_header() -> str | None:
    if not MLX:
        return f"mlx is not installed: tests/{{{','.join(collect_ignore)}}} not collected (the daemon and pair tiers)"
    return None


# The groups that take longest (on the 2-core machine, 2026-12-03): started first, so that neither worker is left
# alone with one of them at the end (xdist's own order, most tests first, put the long groups of few tests last).
# Beside the pair group, which runs first, the other worker starts with commands run one at a time (the signal
# tests), not a crowd of processes: a pair's ranks miss their timeouts on a crowded machine. Every other group
# follows: those with a test that needs a daemon or an editor first (starting one takes seconds, however few the
# tests), then the rest, most tests first within each.
LONG_GROUPS = [
    "pair",  # 1.7 min
    "backend/test_signals.py",  # the demo, serve and fidelity record, each signalled: about 1.5 min
    "batch/test_signals.py",  # 26 commands, each signalled: about 1 min
    "editors/test_nvim.py",  # real Neovim sessions on a daemon: 3 to 5 min alone at load 10
    "batch/test_concurrent.py",  # 16 audits, 8 reviews, 8 language servers on one daemon: about 2 min
    "vscode",  # the VS Code workbench and the extension's build
]
# Within its group, the extension's own check (editors/vscode/ci.sh: npm ci, tests, package) runs first: the .vsix it
# packages is the one the workbench tests install, which would otherwise build it once before and again in ci.sh.
FIRST_IN_GROUP = {"editors/test_vscode.py"}


def worker_group(item: pytest.Item) -> str:
    """Which tests pytest-xdist runs in one worker, one after the other (``--dist loadgroup``): a file's, so its
    module fixtures (daemons among them) start once; every pair test file's together, since two pairs of ranks
    on two cores at once miss their own timeouts; both VS Code test files', which build one directory."""
    path = item.path.relative_to(REPO / "tests")
    if path.parts[0] in TIERS["pair"]:
        return "pair"
    return "vscode" if path.parts[0] in TIERS["editors"] and "vscode" in path.name else path.as_posix()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``daemon``: the daemon's own tests, and every test whose fixtures build a tiny checkpoint (that is,
    need mlx: a daemon, an engine or a real server on it); ``pair``, ``editors``: their directories; ``logic``:
    tests on the daemon's fake (tests/support/fake_daemon.py); ``fuzz``: hypothesis tests. Then the xdist
    groups in the order the workers take them (``--no-loadscope-reorder`` keeps it): LONG_GROUPS first, then
    the groups with a ``daemon`` or ``editors`` test, then the rest; most tests first within each; inside a group,
    FIRST_IN_GROUP's files first, then collection order."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(worker_group(item)))
        directory = item.path.relative_to(REPO / "tests").parts[0]
        for marker, directories in TIERS.items():
            if directory in directories:
                item.add_marker(marker)
        if CHECKPOINT_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("daemon")
        if FAKE_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker("logic")
        if is_hypothesis_test(getattr(item, "obj", None)):
            item.add_marker("fuzz")
    counts = Counter(worker_group(item) for item in items)
    heavy = {worker_group(item) for item in items if {"daemon", "editors"} & {m.name for m in item.iter_markers()}}

    def order(item: pytest.Item) -> tuple[int, bool, int, str, bool]:
        group = worker_group(item)
        long = LONG_GROUPS.index(group) if group in LONG_GROUPS else len(LONG_GROUPS)
        first = item.path.relative_to(REPO / "tests").as_posix() in FIRST_IN_GROUP
        return long, group not in heavy, -counts[group], group, not first

    items.sort(key=order)  # stable: a group's tests keep their order


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported so far (lsprotocol, mlx-lm, transformers, the test modules: about 140,000 objects) lives
    for the whole session: frozen, so that the collection `lost_task_failures` runs after every test walks only what
    tests made since (about 0.002 s instead of 0.09 s, over 1,500 tests)."""
    gc.collect()
    gc.freeze()


LOST = ("exception was never retrieved", "Task was destroyed but it is pending")


@pytest.fixture(autouse=True)
def lost_task_failures(caplog):
    """Fail a test in whose process a task's failure went unretrieved (asyncio logs it when the task is
    collected: collected here, before the check). Servers started by a test are checked by their own harness
    (tests/support/lsp.py reads the server's stderr)."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    yield
    gc.collect()
    records = [r for phase in ("setup", "call", "teardown") for r in caplog.get_records(phase)]
    lost = [r.getMessage() for r in records if r.name == "asyncio" and any(s in r.getMessage() for s in LOST)]
    assert not lost, f"a background task failed and nobody saw it: {lost}"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A make-tiny checkpoint (8 experts, TINY_LAYERS layers, seed 0) in the release's packaging (the k3 dialect: a
    remote-code tokenizer class), built once per test session."""
    from backend.tiny import make_tiny

    return make_tiny(tmp_path_factory.mktemp("models") / "tiny", layers=TINY_LAYERS)


@pytest.fixture(scope="session")
def jinja_model(tiny_model) -> Path:
    """The same weights and vocabulary with the made-up Jinja template (the jinja dialect)."""
    from backend.tiny import make_tiny

    return make_tiny(tiny_model.with_name("tiny-jinja"), dialect="jinja", layers=TINY_LAYERS)


@dataclass(frozen=True)
class Checkpoint:
    dialect: str  # "k3" or "jinja" (backend/tiny.py)
    path: Path


@pytest.fixture(scope="session", params=["k3", "jinja"])
def checkpoint(request) -> Checkpoint:
    """Each dialect of the tiny checkpoint in turn: engine and agent tests run on both renderers, so the
    daemon is shown to depend on neither's quirks. Built once per session each."""
    fixture = "tiny_model" if request.param == "k3" else "jinja_model"
    return Checkpoint(request.param, request.getfixturevalue(fixture))


@pytest.fixture(scope="session")
def pruned_model(tiny_model) -> Path:
    """`tiny_model` pruned to the experts PRUNE_KEEP (config records them as kept_experts)."""
    from backend.tiny import prune

    return prune(tiny_model, tiny_model.with_name("tiny-pruned"), PRUNE_KEEP)
