"""checkpoint_fingerprint: the same checkpoint under any name gives one value; another build never does."""

from __future__ import annotations

import os
import shutil

import pytest

from backend import fingerprint
from backend.fingerprint import FingerprintError, checkpoint_fingerprint
from tests.conftest import TINY_LAYERS
from tests.security.test_local_access import OtherUser, shared_tmp  # noqa: F401 (shared_tmp: a fixture)


def test_the_name_does_not_count_the_checkpoint_does(tiny_model, pruned_model, tmp_path):
    same = shutil.copytree(tiny_model, tmp_path / "elsewhere" / "renamed")
    impostor = shutil.copytree(pruned_model, tmp_path / "other" / tiny_model.name)  # the tiny model's name
    assert checkpoint_fingerprint(same) == checkpoint_fingerprint(tiny_model)
    assert checkpoint_fingerprint(impostor) != checkpoint_fingerprint(tiny_model)


def test_config_index_tokenizer_and_weight_sizes_count_other_files_do_not(tiny_model, tmp_path):
    base = checkpoint_fingerprint(tiny_model)

    def changed(edit) -> str:
        copy = shutil.copytree(tiny_model, tmp_path / f"c{len(os.listdir(tmp_path))}")
        edit(copy)
        return checkpoint_fingerprint(copy)

    def append(name: str, data: bytes):
        return lambda d: (d / name).write_bytes((d / name).read_bytes() + data)

    weights = next(p.name for p in tiny_model.glob("*.safetensors"))
    assert changed(append("config.json", b" ")) != base
    assert changed(append("tokenizer_config.json", b" ")) != base
    assert changed(append(weights, b"\0")) != base  # a weight file of another size
    assert changed(lambda d: (d / weights).rename(d / f"x-{weights}")) != base
    assert changed(lambda d: (d / "model-extra.safetensors").write_bytes(b"\0" * 8)) != base
    assert changed(lambda d: (d / "README.md").write_text("another build")) == base
    assert changed(lambda d: (d / ".cache").mkdir()) == base


def test_a_directory_without_a_config_is_refused(tmp_path):
    with pytest.raises(FingerprintError, match=r"no config\.json"):
        checkpoint_fingerprint(tmp_path)
    with pytest.raises(FingerprintError, match="cannot list"):
        checkpoint_fingerprint(tmp_path / "missing")


def test_two_seeds_of_one_shape_give_two_fingerprints(tiny_model, tmp_path):
    """Same config, same index, same file sizes: only the weights differ, and so must the fingerprint."""
    from backend.tiny import make_tiny

    other = make_tiny(tmp_path / "seed1", seed=1, layers=TINY_LAYERS)
    weights = sorted(p.name for p in tiny_model.glob("*.safetensors"))
    assert weights == sorted(p.name for p in other.glob("*.safetensors"))
    assert [(tiny_model / w).stat().st_size for w in weights] == [(other / w).stat().st_size for w in weights]
    assert checkpoint_fingerprint(other) != checkpoint_fingerprint(tiny_model)


def test_a_flipped_byte_in_a_sampled_range_in_the_middle_of_a_weight_file_counts(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprint, "SAMPLE_BYTES", 16 * 1024)  # the tiny weights are sampled, not read whole
    copy = shutil.copytree(tiny_model, tmp_path / "copy")
    base = checkpoint_fingerprint(copy)
    weights = max(copy.glob("*.safetensors"), key=lambda p: p.stat().st_size)
    size = weights.stat().st_size
    middle = size // 2
    ranges = fingerprint.sampled_ranges(size)
    (offset, length) = min(ranges, key=lambda r: abs(r[0] + r[1] // 2 - middle))
    assert size // 4 < offset < 3 * size // 4, (size, ranges)  # a range in the middle, not the head or the tail
    stat = weights.stat()
    with open(weights, "r+b") as f:
        f.seek(offset + length // 2)
        byte = f.read(1)
        f.seek(offset + length // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same size and mtime: only the content differs
    assert checkpoint_fingerprint(copy) != base


def test_the_sampled_hashes_are_cached_beside_the_checkpoint_until_a_file_changes(tiny_model, tmp_path, monkeypatch):
    copy = shutil.copytree(tiny_model, tmp_path / "copy")
    reads: list[str] = []
    sample = fingerprint.sample_digest
    monkeypatch.setattr(fingerprint, "sample_digest", lambda path, size: reads.append(path.name) or sample(path, size))
    weights = sorted(p.name for p in copy.glob("*.safetensors"))
    first = checkpoint_fingerprint(copy)
    assert sorted(reads) == weights
    assert checkpoint_fingerprint(copy) == first and sorted(reads) == weights  # a restart reads no weights
    assert (copy / fingerprint.CACHE_NAME).is_file()  # hidden: it is not a part of the checkpoint
    touched = copy / weights[0]
    os.utime(touched, (1, 1))
    assert checkpoint_fingerprint(copy) == first and reads.count(weights[0]) == 2  # read again: its mtime changed
    with open(touched, "ab") as f:
        f.write(b"\0")
    assert checkpoint_fingerprint(copy) != first and reads.count(weights[0]) == 3


def test_a_read_only_checkpoint_caches_in_the_users_cache_directory(tiny_model, shared_tmp):  # noqa: F811
    """Another user (uid 65534) who may read the checkpoint but not write its folder keeps the cache in their own
    cache directory, and reads no weights the second time."""
    checkpoint = shutil.copytree(tiny_model, shared_tmp / "shared-model")
    (checkpoint / fingerprint.CACHE_NAME).unlink(missing_ok=True)
    home = shared_tmp / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    for path in (checkpoint, *checkpoint.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)

    def twice() -> dict:
        os.environ["XDG_CACHE_HOME"] = str(home / ".cache")
        reads: list[str] = []
        sample = fingerprint.sample_digest
        fingerprint.sample_digest = lambda path, size: reads.append(path.name) or sample(path, size)
        first = checkpoint_fingerprint(checkpoint)
        count = len(reads)
        second = checkpoint_fingerprint(checkpoint)
        cached = [str(p) for p in (home / ".cache").rglob("*") if p.is_file()]
        return {"same": first == second, "first": count, "second": len(reads) - count, "cached": cached}

    result = OtherUser(twice).result(60)
    assert result["same"] and result["first"] > 0 and result["second"] == 0, result
    assert len(result["cached"]) == 1 and not (checkpoint / fingerprint.CACHE_NAME).exists()
    assert checkpoint_fingerprint(checkpoint) == checkpoint_fingerprint(tiny_model)
