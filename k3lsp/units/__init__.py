"""C and C++ text split into units: one per function, with the file-level context it needs.

The model audits units, not files (a changed function prefills in seconds, a kernel file in minutes), and a
unit's content address is what its result is cached under, so every line of every function must be in exactly
one unit named after its function. ``split`` does it: kernel idioms rewritten without moving a byte
(``kernelc``), the top-level brace blocks and their names (``blocks``), the functions written in a ``#define``
(``templates``), C or C++ decided by what the file says (``cxx``); ``comments`` says where a file's comments
are; ``splitting`` runs the split in a process of its own, off the language server's event loop. It imports
only the contract (``k3lsp.wire``).
"""
