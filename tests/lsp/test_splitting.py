"""The splitter's processes (``k3lsp.units.splitting``, issue 44): while its first worker starts, a small text is
split in the server's own process, so the first file opened does not wait half a second (opened before the
settings are read, it starts the worker); a large one waits for the worker, whose parse does not hold the
server's GIL."""

from __future__ import annotations

from k3lsp.units import split as units
from k3lsp.units.kernelc import Macros
from k3lsp.units.splitting import WHILE_STARTING, Splitter

SMALL = "int f(int n)\n{\n\treturn n;\n}\n"


async def test_a_small_text_does_not_wait_for_the_first_worker_and_a_large_one_does():
    splitter = Splitter(workers=1)
    try:
        assert await splitter.split(SMALL, Macros()) == units.split(SMALL)  # a file opened before `start`
        assert not splitter._warm.done()  # split before the worker it started could be up (a spawn: 0.2 s and more)
        splitter.start(Macros())  # the settings read: the same worker, not a second one
        assert await splitter.split(SMALL, Macros()) == units.split(SMALL) and not splitter._warm.done()
        large = SMALL * (WHILE_STARTING // len(SMALL) + 1)
        assert len(await splitter.split(large, Macros())) == large.count("int f(")
        assert splitter._warm.done()  # the worker took it, after its start
    finally:
        splitter.close(wait=True)
