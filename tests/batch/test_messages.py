"""One clear sentence for each setting that used to go wrong in silence or in contradictions: it names the value
and what to do. Real `k3lsp` processes, no daemon (every case here is decided before one answers, or is about one
that is not there)."""

from __future__ import annotations

import json

from tests.support.batch import k3lsp
from tests.support.daemon import nowhere

FUNCTION = "int f(int a)\n{\n\treturn a;\n}\n"


def test_status_refuses_a_timeout_that_is_not_a_positive_number_of_seconds(tmp_path):
    for bad in ("-5", "nan"):
        done = k3lsp("status", "--timeout", bad, "--endpoint", nowhere(tmp_path), cache=tmp_path / "c", cwd=tmp_path,
                     timeout=30)  # fmt: skip
        assert done.returncode == 2, (bad, done.stderr)
        assert f"argument --timeout: {bad} is not a number of seconds above 0" in done.stderr, done.stderr


def test_a_k3lsp_endpoint_that_is_no_endpoint_is_named_once_with_what_to_do(tmp_path):
    env = {"K3LSP_ENDPOINT": "garbage"}
    said = "K3LSP_ENDPOINT='garbage' is not a ZeroMQ endpoint: set it to one such as ipc:///path/daemon.sock or "
    for args in (("status",), ("audit", "a.c")):
        (tmp_path / "a.c").write_text(FUNCTION)
        done = k3lsp(*args, cache=tmp_path / "c", cwd=tmp_path, env=env, timeout=30)
        assert done.returncode == 2, done.stderr
        assert said in done.stderr, done.stderr
        assert "plain tcp" not in done.stderr and "using 'garbage'" not in done.stderr, done.stderr


def test_an_ipc_endpoint_with_no_daemon_says_how_to_start_one(tmp_path):
    endpoint = nowhere(tmp_path)
    done = k3lsp("status", "--endpoint", endpoint, "--timeout", "1", cache=tmp_path / "c", cwd=tmp_path, timeout=30)
    assert done.returncode == 2
    assert f"{endpoint} is not reachable" in done.stderr
    assert f"start it with `k3-backend serve --model CHECKPOINT --bind {endpoint}`" in done.stderr, done.stderr


def test_an_unusable_cache_dir_is_a_warning_that_names_it_and_the_run_goes_on(tmp_path):
    (tmp_path / "a.c").write_text("")
    (tmp_path / "file").write_text("not a directory")
    done = k3lsp("audit", "a.c", "--json", "--endpoint", nowhere(tmp_path), cache=tmp_path / "file", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = next(w for w in json.loads(done.stdout)["warnings"] if w.startswith("K3LSP_CACHE_DIR="))
    assert said.startswith(f"K3LSP_CACHE_DIR={str(tmp_path / 'file')!r} cannot hold the result cache (")
    assert "File exists" in said
    assert said.endswith(
        "caching in memory for this process only; set K3LSP_CACHE_DIR to a directory you can write, or unset it"
    )
    assert f"k3lsp audit: warning: {said}" in done.stderr, done.stderr


def test_an_invalid_cache_size_is_a_warning_that_names_it_and_the_default(tmp_path):
    (tmp_path / "a.c").write_text("")
    done = k3lsp("audit", "a.c", "--endpoint", nowhere(tmp_path), cache=tmp_path / "c", cwd=tmp_path,
                 env={"K3LSP_CACHE_MAX_BYTES": "lots"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "k3lsp audit: warning: K3LSP_CACHE_MAX_BYTES='lots' is not a positive whole number of bytes: the cache "
        "keeps its default bound, 268,435,456 bytes; set it to one such as 1000000000, or unset it"
    ) in done.stderr, done.stderr


def test_an_endpoint_flag_that_is_no_endpoint_is_refused_without_naming_another(tmp_path):
    (tmp_path / "a.c").write_text(FUNCTION)
    done = k3lsp("audit", "a.c", "--endpoint", "garbage", cache=tmp_path / "c", cwd=tmp_path, timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "k3lsp audit: --endpoint garbage is not a ZeroMQ endpoint such as ipc:///path/daemon.sock or tcp://HOST:PORT\n"
    )
