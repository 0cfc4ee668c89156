"""Which code a kernel configuration builds: kbuild and Kconfig read without building anything.

``config``: a ``.config``'s symbol values; ``defconfig``: a defconfig name (``x86_64_defconfig``, ``tinyconfig``)
made a ``.config`` with the tree's own Kconfig through kconfiglib; ``make``: the small part of GNU make that kbuild
Makefiles use, evaluated in Python; ``tree``: the walk kbuild makes from the top Makefile down the directories, and
the state of every source file (built-in, module, not built and why, unknown); ``guards``: the ``#if CONFIG_``
guards around a line. A part of the layer below the core: it imports nothing else of ours.
"""
