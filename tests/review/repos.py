"""Git repositories the review tests build, with the `git` command (the tests' own repositories, trusted), and
the C code whose patches they review: what each patch changes is known in advance."""

from __future__ import annotations

import subprocess
from pathlib import Path

IDENTITY = ("-c", "user.name=Ann Author", "-c", "user.email=ann@example.org", "-c", "commit.gpgsign=false")

DRIVER_C = """\
#include <linux/uaccess.h>

struct req {
\tchar buf[64];
\tsize_t len;
};

static long drv_read(struct req *r, const char __user *from, size_t n)
{
\tif (n > sizeof(r->buf))
\t\treturn -EINVAL;
\tif (copy_from_user(r->buf, from, n))
\t\treturn -EFAULT;
\tr->len = n;
\treturn 0;
}

static int drv_index(int *table, int i)
{
\tint v = table[i];
\treturn v;
}

static int drv_ioctl(struct req *r, const char __user *from, size_t n)
{
\treturn drv_read(r, from, n);
}
"""

# The patch under review: drv_read loses its bound and copies a user-chosen length; drv_index gains a line.
DRIVER_PATCHED = DRIVER_C.replace(
    "\tif (n > sizeof(r->buf))\n\t\treturn -EINVAL;\n\tif (copy_from_user(r->buf, from, n))",
    "\tif (copy_from_user(r->buf, from, r->len + n))",
).replace("\tint v = table[i];\n", "\tint v = table[i];\n\tv += 1;\n")


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *IDENTITY, *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def repository(root: Path, files: dict[str, str | bytes]) -> Path:
    """A new repository at ``root`` whose first commit holds ``files``."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    commit(root, files, "base")
    return root


def commit(root: Path, files: dict[str, str | bytes | None], message: str) -> str:
    """Write (None: delete) ``files`` and commit them all; the new commit's id."""
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def write(root: Path, files: dict[str, str | bytes | None]) -> None:
    for name, content in files.items():
        path = root / name
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the only line containing ``needle``."""
    hits = [i for i, line in enumerate(text.split("\n"), 1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]
