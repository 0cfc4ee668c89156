"""`k3lsp audit --kconfig CONFIG [--only-built]` on a small kernel tree the test writes: the units a configuration
does not build are counted with their reasons, and skipped with --only-built before any daemon is contacted. Real
processes; the endpoint is one where nobody listens (nothing built is left to audit, or the run's daemon error is
beside the point)."""

from __future__ import annotations

import json

from tests.support.batch import k3lsp
from tests.support.daemon import nowhere

FILES = {
    "Kconfig": "",
    "Makefile": "core-y := kernel/\nvmlinux-dirs := $(patsubst %/,%,$(core-y))\n",
    "arch/x86/Makefile": "",
    "kernel/Makefile": "obj-y += core.o\nobj-$(CONFIG_NET) += net.o\n",
    "kernel/core.c": "#ifdef CONFIG_DEBUG\nint debug(int a)\n{\n\treturn a;\n}\n#endif\n",
    "kernel/net.c": "int send(int a)\n{\n\treturn a;\n}\n\nint receive(int a)\n{\n\treturn a;\n}\n",
    ".config": "# Linux/x86 test Kernel Configuration\n# CONFIG_NET is not set\n",
}


def audit(tmp_path, *args: str):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return k3lsp("audit", *args, "--endpoint", nowhere(tmp_path), cache=tmp_path / "c", cwd=tmp_path)


def test_only_built_skips_what_the_configuration_does_not_build_and_says_why(tmp_path):
    done = audit(tmp_path, "kernel", "--kconfig", ".config", "--only-built", "--json")
    assert done.returncode == 0, done.stderr  # nothing left to send: no daemon needed
    assert (
        "k3lsp audit: warning: kconfig .config: 3 of 3 units not built, skipped (--only-built): 2 in kernel/net.c "
        "(kernel/Makefile:2: `obj-$(CONFIG_NET)` (CONFIG_NET is not set)), 1 in kernel/core.c (line 1: "
        "`#ifdef CONFIG_DEBUG` (CONFIG_DEBUG is not set))"
    ) in done.stderr
    assert json.loads(done.stdout)["stats"]["units"] == 0


def test_kconfig_alone_counts_the_states_and_audits_everything(tmp_path):
    done = audit(tmp_path, "kernel/net.c", "--kconfig", ".config", "--json")
    assert "k3lsp audit: warning: kconfig .config: 2 of 2 units not built (audited all the same; --only-built " in (
        done.stderr
    )
    assert json.loads(done.stdout)["stats"]["units"] == 2


def test_a_wrong_kconfig_or_only_built_alone_is_one_clear_error(tmp_path):
    done = audit(tmp_path, "kernel", "--kconfig", "missing.config")
    assert done.returncode == 2
    assert "kconfig 'missing.config' cannot be read" in done.stderr and "Traceback" not in done.stderr
    done = audit(tmp_path, "kernel", "--only-built")
    assert done.returncode == 2
    assert "--only-built needs --kconfig" in done.stderr
