"""The model's workspace tools: ``read_lines``, ``grep``, ``find_definition``, ``find_references``.

The model asks for more code than its unit; the editor side answers, because the code is here. ``sandbox``
dispatches and bounds each answer, ``confine`` decides which files the model may see (never outside the workspace,
nor a hidden, linked or secret file), ``search`` runs ripgrep kept to those rules, ``symbols`` and ``tagsfile`` keep
the workspace's symbol index, ``ranking`` says which definition comes first. A part of the layer below the core: it
imports units and the contract only.
"""
