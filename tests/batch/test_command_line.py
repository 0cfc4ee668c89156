"""`k3lsp --version`, a help that describes every flag and shows every default, and the completion scripts shtab
generates from the parser (so they name every subcommand without anyone keeping a script by hand)."""

import importlib.metadata
import shutil
import subprocess

import pytest

import k3lsp
from k3lsp.cli.main import build_parser
from tests.support.parsers import bash_completes, completion, names, problems, run


def k3lsp_run(*args: str) -> subprocess.CompletedProcess:
    return run("k3lsp", *args)


def test_version_is_the_distributions():
    assert k3lsp_run("--version").stdout == f"k3lsp {k3lsp.__version__}\n"
    assert k3lsp.__version__ == importlib.metadata.version("k3lsp")  # the one in pyproject.toml


def test_every_flag_is_described_and_every_default_shown():
    assert problems(build_parser()) == []


def test_a_default_is_in_the_help_as_a_user_reads_it():
    done = k3lsp_run("status", "--help")
    assert "seconds to wait for the daemon (default: 5.0)" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("shell", "registers"), [("bash", "complete -o bashdefault -F _shtab_k3lsp k3lsp"), ("zsh", "#compdef k3lsp")]
)
def test_the_completion_script_names_every_subcommand(shell, registers):
    done = completion("k3lsp", shell)
    assert done.returncode == 0, done.stderr
    assert registers in done.stdout.splitlines()
    missing = [name for name in names(build_parser()) if name not in done.stdout]
    assert not missing and len(names(build_parser())) > 50, missing  # variants, mcp, castle, --thinking-effort...


def test_a_shell_it_does_not_know_is_refused():
    done = k3lsp_run("--print-completion", "fish")
    assert done.returncode == 2
    assert "argument --print-completion: invalid choice: 'fish'" in done.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_subcommands_flags_and_choices_with_the_script():
    script = completion("k3lsp", "bash").stdout
    assert bash_completes(script, "_shtab_k3lsp", ["k3lsp", "au"]) == ["audit"]
    assert bash_completes(script, "_shtab_k3lsp", ["k3lsp", "eval", "f"]) == ["fixes"]
    assert bash_completes(script, "_shtab_k3lsp", ["k3lsp", "audit", "--for"]) == ["--format"]
    assert bash_completes(script, "_shtab_k3lsp", ["k3lsp", "audit", "--format", "s"]) == ["sarif"]
