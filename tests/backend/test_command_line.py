"""`k3-backend --version`, a help that describes every flag of every subcommand and shows every default, and the
completion scripts shtab generates from the parser, with every subcommand's flags (which the parser adds only
for the chosen subcommand otherwise, so that `--help` does not import mlx)."""

import shutil
import subprocess

import pytest

import k3lsp
from backend.cli import COMMANDS, build_parser
from tests.support.parsers import bash_completes, completion, names, problems, run


def backend_run(*args: str) -> subprocess.CompletedProcess:
    return run("backend.cli", *args)


def test_version():
    assert backend_run("--version").stdout == f"k3-backend {k3lsp.__version__}\n"


def test_every_flag_of_every_subcommand_is_described_and_every_default_shown():
    assert problems(build_parser(["--print-completion"])) == []


def test_a_default_is_in_the_help_as_a_user_reads_it():
    done = backend_run("serve", "--help")
    assert "--prefill-step-size PREFILL_STEP_SIZE" in done.stdout
    assert "open requests per client (default: 16)" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("shell", "registers"),
    [("bash", "complete -o bashdefault -F _shtab_k3_backend k3-backend"), ("zsh", "#compdef k3-backend")],
)
def test_the_completion_script_names_every_subcommand_and_their_flags(shell, registers):
    done = completion("backend.cli", shell)
    assert done.returncode == 0, done.stderr
    assert registers in done.stdout.splitlines()
    every = names(build_parser(["--print-completion"]))
    missing = [name for name in every if name not in done.stdout]
    assert not missing and set(COMMANDS) <= every and "--prefill-step-size" in every, missing


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_a_subcommands_flags_with_the_script():
    script = completion("backend.cli", "bash").stdout
    assert bash_completes(script, "_shtab_k3_backend", ["k3-backend", "su"]) == ["supervise"]
    assert bash_completes(script, "_shtab_k3_backend", ["k3-backend", "serve", "--prefill"]) == ["--prefill-step-size"]
