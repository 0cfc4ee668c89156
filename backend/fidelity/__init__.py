"""The fidelity report: the model card's evaluation, on the user's own build, traces and deployment.

`record` runs a reference model teacher-forced on audit-session windows (and code corpora) and stores its
predictions in a BASE file; `compare` runs a candidate (a pruned or quantized build, or the same build
sharded over ranks) on the identical tokens and prints the card's two tables. See docs/fidelity.md.
"""
