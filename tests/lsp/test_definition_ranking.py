"""find_definition puts the real definition first (issue 44: on Linux `kmalloc` first pointed at
lib/decompress_unxz.c's macro, `printk` at a header stub before kernel/printk/printk.c), and the one the
audited file uses when several are real: its own, those of the headers it includes, its directory's, its
subsystem's. A generated tree with the shapes of the Linux cases; the real index (ctags) over it."""

from __future__ import annotations

import asyncio

import pytest

from k3lsp.core.answers import ToolAnswerer
from k3lsp.tools import sandbox

BODY = "{\n" + "".join(f"\tk3_step({i});\n" for i in range(8)) + "\treturn NULL;\n}\n"
TREE = {
    "include/linux/slab.h": "static __always_inline void *kmalloc(size_t size, gfp_t flags)\n" + BODY,
    "include/linux/printk.h": "static inline int printk(const char *s, ...)\n{\n\treturn 0;\n}\n",
    "include/linux/k3.h": "struct k3_config {\n\tint on;\n};\n",
    "arch/arm/k3.h": "struct k3_config {\n\tlong on;\n};\n",
    "kernel/printk/printk.c": "asmlinkage __visible int printk(const char *fmt, ...)\n" + BODY,
    "lib/decompress_unxz.c": "#define kmalloc(size, flags) malloc(size)\n#define kfree(ptr) free(ptr)\n"
    "static void *k3_unxz(void)\n{\n\treturn kmalloc(1, 0);\n}\n",
    "lib/k3_helper.c": "int k3_helper(void)\n" + BODY,
    "mm/slub.c": "void kfree(const void *x)\n" + BODY,
    "tools/testing/radix-tree/linux.c": "void *kmalloc(size_t size, gfp_t gfp)\n"
    + BODY
    + "void kfree(void *p)\n"
    + BODY,
    "drivers/k3/k3_util.c": "int k3_helper(void)\n" + BODY,
    "drivers/k3/k3_main.c": "#include <linux/slab.h>\n#include <linux/k3.h>\n\n"
    "static int k3_probe(struct k3_config *c)\n{\n\treturn k3_helper() + !!kmalloc(4, 0);\n}\n",
}


@pytest.fixture(autouse=True)
def index_dir(tmp_path, monkeypatch):
    """Symbol indexes go beside a cache of the test's own, not the user's."""
    monkeypatch.setenv("K3LSP_CACHE_DIR", str(tmp_path / "k3cache"))


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "linux"
    for rel, text in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def first_place(root, symbol: str, caller: str | None = None) -> str:
    ok, text = sandbox.run_tool(root, "find_definition", {"symbol": symbol}, caller)
    assert ok, text
    return text.split("\n")[1]


def test_a_function_body_comes_before_a_macro_a_stub_and_a_deeper_shim(tree):
    assert first_place(tree, "kmalloc").startswith("include/linux/slab.h:1-")  # not the macro, not tools/
    assert first_place(tree, "kfree").startswith("mm/slub.c:1-")
    assert first_place(tree, "printk").startswith("kernel/printk/printk.c:1-")  # not the `return 0` stub
    ok, text = sandbox.run_tool(tree, "find_definition", {"symbol": "printk"})
    assert ok and "include/linux/printk.h:1-4 (function)" in text  # the stub is still listed, after


def test_the_callers_own_file_includes_directory_and_subsystem_come_first(tree):
    assert first_place(tree, "k3_helper").startswith("lib/k3_helper.c:")  # no caller: the shallower one
    assert first_place(tree, "k3_helper", "drivers/k3/k3_main.c").startswith("drivers/k3/k3_util.c:")
    assert first_place(tree, "k3_config").startswith("arch/arm/k3.h:")
    assert first_place(tree, "k3_config", "drivers/k3/k3_main.c").startswith("include/linux/k3.h:")  # included
    assert first_place(tree, "kmalloc", "lib/decompress_unxz.c").startswith("lib/decompress_unxz.c:1-1 (macro)")
    assert first_place(tree, "kmalloc", "no/such/file.c").startswith("include/linux/slab.h:")


def test_the_tool_answerer_ranks_for_the_unit_it_answers(tree):
    request = {"tool": "find_definition", "args": {"symbol": "k3_helper"}}
    ok, text = asyncio.run(ToolAnswerer().answer(tree, request, "drivers/k3/k3_main.c"))
    assert ok and text.split("\n")[1].startswith("drivers/k3/k3_util.c:")
