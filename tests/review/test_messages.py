"""What `k3lsp review` says when the patches named are not what the user meant: a range written backwards, a range
with nothing in it, a series that does not apply to the base it was given. Real repositories, real processes; no
daemon answers (nothing here reaches one)."""

from __future__ import annotations

import json

from tests.review import repos
from tests.support.batch import k3lsp
from tests.support.daemon import nowhere


def history(tmp_path, n: int = 3):
    root = repos.repository(tmp_path / "drv", {"drv.c": repos.DRIVER_C})
    for i in range(n):
        repos.commit(root, {"drv.c": repos.DRIVER_C + f"\nint extra_{i}(void)\n{{\n\treturn {i};\n}}\n"}, f"c{i}")
    return root


def review(root, tmp_path, *args: str):
    return k3lsp("review", "--endpoint", nowhere(tmp_path), "-C", str(root), *args, cache=tmp_path / "c", cwd=root,
                 timeout=60)  # fmt: skip


def test_a_range_written_backwards_is_an_error_that_says_which_way_it_goes(tmp_path):
    root = history(tmp_path)
    done = review(root, tmp_path, "HEAD..HEAD~3")
    assert done.returncode == 2, done.stderr
    assert (
        "k3lsp review: error: HEAD..HEAD~3 names no commit: HEAD~3 is an ancestor of HEAD, and a range runs from "
        "the older commit to the newer; did you mean HEAD~3..HEAD?"
    ) in done.stderr, done.stderr


def test_an_empty_range_is_a_warning_and_a_clean_exit(tmp_path):
    """`origin/main..HEAD` in CI on main itself: nothing to review is no failure, but it is said."""
    root = history(tmp_path, 1)
    done = review(root, tmp_path, "HEAD..HEAD")
    assert done.returncode == 0, done.stderr
    assert "k3lsp review: warning: HEAD..HEAD names no commit (HEAD holds none that HEAD does not): nothing to " \
           "review" in done.stderr, done.stderr  # fmt: skip


def test_a_series_that_does_not_apply_says_to_name_its_base(tmp_path):
    root = history(tmp_path, 2)
    repos.git(root, "format-patch", "-q", "-1", "HEAD", "-o", str(tmp_path / "out"))  # written against HEAD~1
    (mail,) = (tmp_path / "out").iterdir()
    repos.commit(root, {"drv.c": repos.DRIVER_C.replace("buf[64]", "buf[32]")}, "moved on")
    head = repos.git(root, "rev-parse", "HEAD")[:12]
    done = review(root, tmp_path, "--patch", str(mail))
    assert done.returncode == 2, done.stderr
    assert (
        f"k3lsp review: error: the series does not apply to HEAD ({head}): name the commit it was written "
        "against with --base REV (b4 and git format-patch --base record it as base-commit:)"
    ) in done.stderr, done.stderr


def test_an_unusable_cache_dir_is_a_warning_of_the_review(tmp_path):
    root = history(tmp_path, 1)
    (tmp_path / "file").write_text("not a directory")
    done = k3lsp("review", "HEAD..HEAD", "--json", "-C", str(root), "--endpoint", nowhere(tmp_path),
                 cache=tmp_path / "file", cwd=root, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = f"K3LSP_CACHE_DIR={str(tmp_path / 'file')!r} cannot hold the result cache ("
    assert f"k3lsp review: warning: {said}" in done.stderr, done.stderr
    assert any(w.startswith(said) for w in json.loads(done.stdout)["warnings"]), done.stdout
