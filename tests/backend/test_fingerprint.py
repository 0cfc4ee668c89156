"""checkpoint_fingerprint: the same checkpoint under any name gives one value; another build never does."""

from __future__ import annotations

import os
import shutil

import pytest

from backend.fingerprint import FingerprintError, checkpoint_fingerprint


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
