"""The planted test tree of the variants tests: kernel-style C with a missing NULL check after ``kmalloc`` and a
double ``kfree``, each once as the original finding and again as variants elsewhere, beside code that is right;
the rules a model writes for them; and the reports `k3lsp audit` writes of a finding in it (JSON and SARIF)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from k3lsp.cli.batch import BatchReport, print_json
from k3lsp.cli.sarif import to_sarif
from k3lsp.findings.report import Reported
from tests.kbuild import trees

# drivers/net/a.c: the original finding (line 7: p used unchecked), a variant (line 16), a checked allocation
A_C = """\
#include <linux/slab.h>
struct buf { int len; char *data; };

int a_open(int n)
{
\tstruct buf *p = kmalloc(sizeof(*p), GFP_KERNEL);
\tp->len = n;
\treturn 0;
}

int a_grow(int n)
{
\tstruct buf *q;

\tq = kmalloc(sizeof(*q), GFP_KERNEL);
\tq->len = n;
\treturn 0;
}

int a_safe(int n)
{
\tstruct buf *r = kmalloc(sizeof(*r), GFP_KERNEL);
\tif (!r)
\t\treturn -ENOMEM;
\tr->len = n;
\treturn 0;
}
"""
# drivers/usb/b.c: a variant in another file (line 6), and a double kfree (line 13)
B_C = """\
#include <linux/slab.h>
struct urb_ctx { int state; };

int b_probe(void)
{
\tstruct urb_ctx *c = kmalloc(sizeof(*c), GFP_KERNEL);
\tc->state = 1;
\treturn 0;
}

void b_release(struct urb_ctx *c)
{
\tkfree(c);
\tkfree(c);
}
"""
# fs/c.c: a double kfree with work between (line 8), and a free then a reallocation (right)
C_C = """\
#include <linux/slab.h>

void c_drop(char *name, int n)
{
\tkfree(name);
\tif (n > 2)
\t\tn--;
\tkfree(name);
}

void c_reset(char *name)
{
\tkfree(name);
\tname = kmalloc(8, GFP_KERNEL);
\tkfree(name);
}
"""

UNCHECKED_KMALLOC = """\
@@
type T;
identifier x, fld;
expression E;
@@
(
* T *x = kmalloc(...);
|
* x = kmalloc(...);
)
... when != x == NULL
    when != !x
* x->fld = E
"""
DOUBLE_KFREE = """\
@@
expression E, E2;
@@
kfree(E);
... when != E = E2
* kfree(E);
"""

# the tree made a kernel tree whose .config builds drivers/ (d.c's double kfree only under an #ifdef it does not
# set) and not fs/c.c, where the double kfree's variant is (issue 43)
KBUILD = trees.layout("drivers/ fs/", "# CONFIG_FS_C is not set\n") | {
    "drivers/Makefile": "obj-y += net/ usb/\n",
    "drivers/net/Makefile": "obj-y += a.o d.o\n",
    "drivers/net/d.c": "#ifdef CONFIG_D_OLD\n" + C_C.split("void c_reset")[0].replace("c_drop", "d_drop") + "#endif\n",
    "drivers/usb/Makefile": "obj-y += b.o\n",
    "fs/Makefile": "obj-$(CONFIG_FS_C) += c.o\n",
}


def plant(root: Path) -> Path:
    """The tree under ``root``: drivers/net/a.c, drivers/usb/b.c, fs/c.c."""
    for rel, text in (("drivers/net/a.c", A_C), ("drivers/usb/b.c", B_C), ("fs/c.c", C_C)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def reports(root: Path, folder: Path, finding: Reported) -> tuple[Path, Path]:
    """``folder``/r.json and r.sarif: the report of ``finding`` in the tree ``root`` as `k3lsp audit` writes them."""
    report = BatchReport(root, files=3, units=6, findings=[finding])
    out = io.StringIO()
    print_json(report, out)
    (folder / "r.json").write_text(out.getvalue())
    (folder / "r.sarif").write_text(json.dumps(to_sarif(report, 1)))
    return folder / "r.json", folder / "r.sarif"
