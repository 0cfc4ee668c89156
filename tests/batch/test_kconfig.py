"""`k3lsp audit --kconfig CONFIG [--only-built]` on a small kernel tree the test writes: the units a configuration
does not build are counted with their reasons, and skipped with --only-built before any daemon is contacted. Real
processes; the endpoint is one where nobody listens (nothing built is left to audit, or the run's daemon error is
beside the point)."""

from __future__ import annotations

import json

from tests.batch import corpus
from tests.kbuild import trees
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere

FILES = trees.layout("kernel/", "# CONFIG_NET is not set\n") | {
    "kernel/Makefile": "obj-y += core.o\nobj-$(CONFIG_NET) += net.o\n",
    "kernel/core.c": "#ifdef CONFIG_DEBUG\nint debug(int a)\n{\n\treturn a;\n}\n#endif\n",
    "kernel/net.c": "int send(int a)\n{\n\treturn a;\n}\n\nint receive(int a)\n{\n\treturn a;\n}\n",
}


def audit(tmp_path, *args: str):
    trees.write(tmp_path, FILES)
    return k3lsp("audit", *args, "--endpoint", nowhere(tmp_path), cache=tmp_path / "c", cwd=tmp_path)


def test_only_built_skips_what_the_configuration_does_not_build_and_says_why(tmp_path):
    done = audit(tmp_path, "kernel", "--kconfig", ".config", "--only-built", "--json")
    assert done.returncode == 0, done.stderr  # nothing left to send: no daemon needed
    assert (  # the .config named as an absolute path, the files as the report's rows name them (from kernel/)
        f"k3lsp audit: warning: kconfig {tmp_path / '.config'}: 3 of 3 units not built, skipped (--only-built, "
        "unbuilt: hide): 2 in net.c (kernel/Makefile:2: `obj-$(CONFIG_NET)` (CONFIG_NET is not set)), 1 in core.c "
        "(line 1: `#ifdef CONFIG_DEBUG` (CONFIG_DEBUG is not set))"
    ) in done.stderr
    assert json.loads(done.stdout)["stats"]["units"] == 0


def test_kconfig_alone_counts_the_states_and_audits_everything(tmp_path):
    done = audit(tmp_path, "kernel/net.c", "--kconfig", ".config", "--json")
    said = f"k3lsp audit: warning: kconfig {tmp_path / '.config'}: 2 of 2 units not built (audited all the same; "
    assert said in done.stderr
    assert json.loads(done.stdout)["stats"]["units"] == 2


def test_a_wrong_kconfig_or_only_built_alone_is_one_clear_error(tmp_path):
    done = audit(tmp_path, "kernel", "--kconfig", "missing.config")
    assert done.returncode == 2
    assert f"kconfig '{tmp_path / 'missing.config'}' cannot be read" in done.stderr and "Traceback" not in done.stderr
    done = audit(tmp_path, "kernel", "--only-built")
    assert done.returncode == 2
    assert "--only-built needs --kconfig" in done.stderr


def test_only_builts_cost_estimate_counts_only_the_units_it_will_send(tmp_path):
    """A named file over maxFileBytes is announced with what it costs; with --only-built its unbuilt units are
    skipped, so the estimate counted them too (20,002 units for 2 sent) before."""
    unbuilt = "".join(f"int gen_{i}(int a)\n{{\n\treturn a * {i} + {i * 7} - {i * 13} + {i * 17} - 1;\n}}\n"
                      for i in range(20_000))  # fmt: skip
    built = "int kept(int a)\n{\n\treturn a;\n}\n\nint also(int a)\n{\n\treturn a;\n}\n"
    (tmp_path / "kernel").mkdir()
    (tmp_path / "kernel" / "gen.c").write_text(built + "#ifdef CONFIG_DEBUG\n" + unbuilt + "#endif\n")
    done = audit(tmp_path, "kernel/gen.c", "--kconfig", ".config", "--only-built")
    first = done.stderr.splitlines()[0]
    assert first.startswith("k3lsp audit: warning: kernel/gen.c: ") and "over maxFileBytes" in first, done.stderr
    assert "audited because it is named, 2 units, about " in first, first
    assert first.endswith("; 20,000 more not built, skipped (--only-built)"), first
    done = audit(tmp_path, "kernel/gen.c", "--kconfig", ".config")  # without --only-built every unit is sent
    assert "audited because it is named, 20,002 units, about " in done.stderr.splitlines()[0], done.stderr


KERNEL_LAYOUT = trees.layout("src/ lib/", "# CONFIG_NET is not set\n") | {  # the batch corpus made a kernel tree
    "src/Makefile": "obj-y += net/\n",
    "src/net/Makefile": "obj-$(CONFIG_NET) += parse.o\n",  # src/net/ built only with CONFIG_NET
    "lib/Makefile": "obj-y += util.o\n",
}


def kernel_corpus(tmp_path):
    return trees.write(corpus.tree(tmp_path), KERNEL_LAYOUT)


def test_each_finding_says_its_units_state_in_json_and_sarif(corpus_daemon, tmp_path):
    kernel_corpus(tmp_path)
    common = ("proj", "--endpoint", corpus_daemon.endpoint, "--kconfig", "proj/.config")
    done = k3lsp("audit", *common, "--json", cache=tmp_path / "c", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    states = {
        (f["uri"], f["cwe"]): (f["kconfig_state"], f["kconfig_reason"]) for f in json.loads(done.stdout)["findings"]
    }
    unbuilt = ("not built", "src/net/Makefile:1: `obj-$(CONFIG_NET)` (CONFIG_NET is not set)")
    assert states[("src/net/parse.c", 787)] == states[("src/net/parse.c", 125)] == unbuilt
    assert "2 of 5 units not built (audited all the same" in done.stderr
    assert "built-in 2, module 0, unknown 1" in done.stderr  # lib/util.c's two; proto.h, a header no rule names
    sarif = k3lsp("audit", *common, "--format", "sarif", cache=tmp_path / "c", cwd=tmp_path)
    properties = [r["properties"] for r in json.loads(sarif.stdout)["runs"][0]["results"]]
    assert {(p["kconfigState"], p["kconfigReason"]) for p in properties if p["kconfigState"] != "unknown"} == {unbuilt}


def test_only_built_sends_no_unbuilt_unit_and_says_how_many_it_skipped(corpus_daemon, tmp_path):
    kernel_corpus(tmp_path)
    args = ("proj", "--endpoint", corpus_daemon.endpoint, "--kconfig", "proj/.config", "--only-built", "--json")
    done = k3lsp("audit", *args, cache=tmp_path / "c", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert not any(f["uri"] == "src/net/parse.c" for f in report["findings"])
    assert report["stats"]["audited"] == report["stats"]["units"] == 3  # parse.c's two units never sent
    assert "2 of 5 units not built, skipped (--only-built, unbuilt: hide): 2 in src/net/parse.c" in done.stderr
