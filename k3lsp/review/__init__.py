"""``k3lsp review``: patches reviewed as kernel auditors review them (docs/review.md).

``series`` says what is under review as patches (a range, a commit, the index, the work tree, or the mails of a
series read by ``mbox``); ``changed`` hands each patch's files with their change set to the audit service, which
audits the functions the patch changed with the change in view, and says of each finding whether the patch
introduced it or it was there before; ``output`` writes text, JSON, SARIF or a reply for the mailing list;
``command`` is the subcommand. A front end: it reads the repository through ``k3lsp.git`` and audits through
``k3lsp.core.service``.
"""
