"""A repository read through libgit2 as a hostile one, running none of its code or configuration.

``repo``: its commits, trees, index and work tree, and the base a change is measured from; ``patches``: what a
patch did to one file (its hunks, the lines it added or modified, the file after it, applied in memory). The
review reads the patches under review here, the editor's changed-code scope the lines the work tree changed, the
review's silencing what the base had. A part of the layer below the core: it imports the tools' confinement
rules (which names are secret) and the contract only.
"""
