"""`k3lsp eval`: how good the audits are, measured on labelled bugs through the same audit core as every front end.

Two yardsticks. ``castle``: the CASTLE-C250 benchmark (250 small C programs, 150 vulnerable), scored exactly as
its authors score the tools in their paper, so our figure stands beside theirs. ``fixes``: a project's own bug
history, the commits whose ``Fixes:`` tag names the commit that brought the bug in: was that commit's review
able to point at the lines the fix later changed? The map:

- ``castle``: the dataset (read without ever showing its labels), the programs as the model sees them;
  ``castle_run``: a run of every configuration over the audit core, and the analyzers alone;
  ``castle_witnesses``: each program's analyzer alerts;
- ``castle_score``: the authors' scoring rules (TP, TN, FP, FN, the Top-25 bonus, the CASTLE score);
- ``history``: the fix commits of a repository, sampled reproducibly; ``bugs``: the lines each fix blames;
  ``git``: the repository read without running any of its code or configuration;
- ``review``: what the review front end gives for one commit (the seam to ``k3lsp review``);
- ``fixes_run``: each introducing commit reviewed, per configuration;
- ``catching``: whether a review caught its bug, the Wilson interval, noise and rates per directory;
- ``cost``: tokens, seconds and tool calls per audited unit; ``matrix``: the settings a sweep compares;
- ``running``: one configuration's run over the audit core; ``report``: JSON and Markdown; ``charts``: PNGs;
- ``command``: the `k3lsp eval` subcommand.
"""
