"""A git repository with a bug history, built by the tests: commits that bring bugs in, edits in between, and fix
commits whose `Fixes:` tags name them (and the commits a selection must pass over)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "A. Author",
    "GIT_AUTHOR_EMAIL": "a@example.org",
    "GIT_COMMITTER_NAME": "A. Author",
    "GIT_COMMITTER_EMAIL": "a@example.org",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | ENV
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(repo, "add", rel)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def show(repo: Path, commit: str, path: str) -> str:
    return git(repo, "show", f"{commit}:{path}") + "\n"


def line_of(text: str, needle: str) -> int:
    hits = [i for i, line in enumerate(text.split("\n"), 1) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


BUF_V0 = """\
struct buf {
\tint len;
\tint data[16];
};

int buf_get(struct buf *b, int i)
{
\tif (i >= b->len)
\t\treturn -1;
\treturn b->data[i];
}
"""
BUF_BUG = (
    BUF_V0
    + """
void buf_put(struct buf *b, int i, int v)
{
\tb->data[i] = v;
\tb->len++;
}
"""
)
# In between: a new function above buf_put (every later line moves down) and another line of buf_put changed.
BUF_EDITED = (
    BUF_V0
    + """
/* Clears the buffer. */
void buf_clear(struct buf *b)
{
\tb->len = 0;
}

void buf_put(struct buf *b, int i, int v)
{
\tb->data[i] = v;
\tb->len += 1;
}
"""
)
BUF_FIXED = BUF_EDITED.replace("\tb->data[i] = v;", "\tif (i < 16)\n\t\tb->data[i] = v;")

NAME_BUG = """\
#include <string.h>

int name_copy(char *dst, int n, const char *src)
{
\tint used = 0;
\tstrcpy(dst, src);
\treturn used;
}
"""
NAME_FIXED = NAME_BUG.replace("\tint used = 0;\n", "\tint used = 0;\n\tif ((int)strlen(src) >= n)\n\t\treturn -1;\n")

LOCK_BUG = """\
static int counter;

void count_up(int by)
{
\tint old = counter;
\tcounter = old + by;
}
"""
LOCK_FIXED = LOCK_BUG.replace("\tcounter = old + by;", "\t__atomic_add_fetch(&counter, by, 0);")


@dataclass
class History:
    repo: Path
    put_bug: str = ""  # I: buf_put writes past data
    put_fix: str = ""  # F: a changed line, after edits in between
    name_bug: str = ""  # I: strcpy without a bound
    name_fix: str = ""  # F: adds a check only
    count_bug: str = ""  # I: a racy counter
    count_fix: str = ""  # F: a changed line (the review will miss it)
    docs: str = ""  # I touching no C, and its fix
    docs_fix: str = ""
    skipped: dict[str, str] = field(default_factory=dict)  # what a selection must pass over -> the commit


def fixes_tag(sha: str, subject: str) -> str:
    return f'Fixes: {sha[:12]} ("{subject}")'


def build(root: Path) -> History:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    h = History(repo)
    commit(repo, "initial", {"net/core/buf.c": BUF_V0, "README": "a project\n"})
    h.put_bug = commit(repo, "net: add buf_put", {"net/core/buf.c": BUF_BUG})
    h.name_bug = commit(repo, "fs: add name_copy", {"fs/name.c": NAME_BUG})
    h.count_bug = commit(repo, "kernel: count up", {"kernel/sched/count.c": LOCK_BUG})
    h.docs = commit(repo, "docs: explain", {"README": "a project\nthat does things\n"})
    commit(repo, "net: add buf_clear, count by one", {"net/core/buf.c": BUF_EDITED})
    h.put_fix = commit(
        repo,
        f"net: bound the index of buf_put\n\nIt wrote past data.\n\n{fixes_tag(h.put_bug, 'net: add buf_put')}\n",
        {"net/core/buf.c": BUF_FIXED},
    )
    h.name_fix = commit(
        repo, f"fs: check the length\n\n{fixes_tag(h.name_bug, 'fs: add')}\n", {"fs/name.c": NAME_FIXED}
    )
    h.count_fix = commit(
        repo, f"kernel: atomic count\n\n{fixes_tag(h.count_bug, 'x')}\n", {"kernel/sched/count.c": LOCK_FIXED}
    )
    h.docs_fix = commit(
        repo, f"docs: typo\n\n{fixes_tag(h.docs, 'docs')}\n", {"README": "a project\nthat does things.\n"}
    )
    h.skipped["unresolved"] = commit(
        repo, 'net: tidy\n\nFixes: 0123456789ab ("not here")\n', {"net/core/buf.c": BUF_FIXED + "\n"}
    )
    git(repo, "checkout", "-q", "-b", "side", h.put_bug)
    commit(repo, "side work", {"side.c": "int side(void)\n{\n\treturn 0;\n}\n"})
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "side", "-m", f"Merge side\n\n{fixes_tag(h.put_bug, 'x')}\n")
    h.skipped["merge"] = git(repo, "rev-parse", "HEAD")
    return h
