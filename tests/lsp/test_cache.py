"""cache: content-addressed results in sqlite, shared by processes, surviving restarts and corruption."""

import logging
import subprocess
import sys
import textwrap

from k3lsp.wire import cache

FINDING = {"cwe": 120, "severity": "high", "title": "t", "message": "m", "start_line": 1, "end_line": 1, "trace": []}


def test_put_get_by_unit_and_result_key(tmp_path):
    c = cache.ResultCache(tmp_path / "r.sqlite3")
    assert c.get("k1", "r1") is None
    c.put("k1", "r1", [FINDING], {"tokens": 42})
    got = c.get("k1", "r1")
    assert got.findings == [FINDING] and got.stats == {"tokens": 42} and got.created > 0
    assert c.get("k1", "r2") is None and c.get("k1", "r3") is None
    c.put("k1", "r1", [], None)  # a re-audit replaces
    assert c.get("k1", "r1").findings == []
    s = c.stats()
    assert s["entries"] == 1 and s["hits"] == 2 and s["misses"] == 3 and s["bytes"] > 0


def test_survives_restart_and_uses_the_env_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "env"))
    assert cache.default_path() == tmp_path / "env" / cache.FILE_NAME
    first = cache.ResultCache()
    first.put("k", "r", [FINDING])
    first.close()
    assert cache.ResultCache().get("k", "r").findings == [FINDING]


def test_corrupt_file_is_moved_aside_and_recreated(tmp_path, caplog):
    path = tmp_path / "r.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
        c = cache.ResultCache(path)
    assert "moved aside" in caplog.text
    assert [p.name for p in tmp_path.glob("r.sqlite3.corrupt-*")]
    c.put("k", "r", [FINDING])
    assert c.get("k", "r").findings == [FINDING]


def test_file_corrupted_while_open_is_recovered(tmp_path, caplog):
    path = tmp_path / "r.sqlite3"
    c = cache.ResultCache(path)
    c.put("k", "r", [FINDING])
    c.close()
    c = cache.ResultCache(path)
    for suffix in ("", "-wal", "-shm"):
        p = tmp_path / f"r.sqlite3{suffix}"
        if p.exists():
            p.write_bytes(b"\x00garbage" * 1000)
    with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
        assert c.get("k", "r") is None  # lost, but no exception
    c.put("k2", "r", [FINDING])
    assert c.get("k2", "r") is not None


def test_unusable_location_falls_back_to_memory(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, logger="k3lsp.wire.cache"):
        c = cache.ResultCache(blocker / "sub" / "r.sqlite3")  # parent is a file: cannot mkdir
    assert "in memory" in caplog.text
    c.put("k", "r", [FINDING])
    assert c.get("k", "r") is not None


def test_unreadable_row_is_a_miss(tmp_path):
    c = cache.ResultCache(tmp_path / "r.sqlite3")
    c._conn.execute("INSERT INTO results VALUES ('k', 'r', 10, 0, 0, 'not json', '{}')")
    assert c.get("k", "r") is None


WRITER = textwrap.dedent(
    """
    import sys
    from k3lsp.wire.cache import ResultCache
    c = ResultCache(sys.argv[1])
    for i in range(200):
        c.put(f"{sys.argv[2]}-{i}", "r", [{"i": i}])
        assert c.get(f"{sys.argv[2]}-{i}", "r") is not None
    """
)


def test_several_processes_share_one_cache(tmp_path):
    path = tmp_path / "shared.sqlite3"
    cache.ResultCache(path).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{n}"], stderr=subprocess.PIPE) for n in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    c = cache.ResultCache(path)
    assert c.stats()["entries"] == 600
    assert c.get("w2-199", "r").findings == [{"i": 199}]
