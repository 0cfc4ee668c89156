"""The model's rule taken out of its answer and refused, with one sentence, when it could run code, read a file or
set spatch's options (k3lsp/variants/rule.py); spatch never sees such a rule."""

from __future__ import annotations

import pytest

from k3lsp.variants.rule import RuleRefused, check, extract
from tests.variants.tree import DOUBLE_KFREE, UNCHECKED_KMALLOC


def test_the_rule_is_the_fenced_block_of_the_answer():
    answer = f"The pattern is an allocation used unchecked.\n```cocci\n{UNCHECKED_KMALLOC}```\nThat is all."
    assert extract(answer) == UNCHECKED_KMALLOC
    assert extract(DOUBLE_KFREE) == DOUBLE_KFREE
    with pytest.raises(RuleRefused, match="no rule"):
        extract("I cannot write a rule for this.")


@pytest.mark.parametrize("rule", [UNCHECKED_KMALLOC, DOUBLE_KFREE])
def test_a_plain_rule_passes(rule):
    assert check(rule) == rule


HOSTILE = {
    "script:python": '@r@\nexpression E;\n@@\n*kfree(E);\n\n@script:python@\ne << r.E;\n@@\nopen("/tmp/x", "w")\n',
    "script:ocaml": '@r@\nexpression E;\n@@\n*kfree(E);\n\n@ script : ocaml @\ne << r.E;\n@@\nSys.command "id"\n',
    "initialize": '@initialize:ocaml@\n@@\nlet _ = Sys.command "id"\n\n@@\n@@\n*kfree(...);\n',
    "finalize": "@finalize:python@\n@@\nimport os\n\n@@\n@@\n*kfree(...);\n",
    "constraint": '@@\nidentifier f : script:python() { __import__("os").system("id") };\n@@\n*f(...);\n',
    "include": '#include "/home/me/rules.cocci"\n@@\n@@\n*kfree(...);\n',
    "spatch options": "#spatch --include-headers\n@@\n@@\n*kfree(...);\n",
    "using": '@r using "/home/me/x.iso"@\n@@\n*kfree(...);\n',
    "virtual": "virtual report\n@@\n@@\n*kfree(...);\n",
    "option in text": "@@\n@@\n*kfree(...); // --include /home/me/x.h\n",
    # spatch reads a rule's header as tokens: a newline or a comment between them still makes a script
    "header over lines": "@r@\nexpression E;\n@@\n*kfree(E);\n\n@script\n:\npython@\ne << r.E;\n@@\nprint(1)\n",
    "comment in header": "@r@\nexpression E;\n@@\n*kfree(E);\n\n@script/* x */:python@\ne << r.E;\n@@\nprint(1)\n",
    "line comment": "@r@\nexpression E;\n@@\n*kfree(E);\n\n@script // x\n:python@\ne << r.E;\n@@\nprint(1)\n",
    "comments in header": "@r@\nexpression E;\n@@\n*kfree(E);\n\n@script/**/:/**/python@\ne << r.E;\n@@\nprint(1)\n",
    "include after a comment": '/* x */ #include "/home/me/rules.cocci"\n@@\n@@\n*kfree(...);\n',
    "virtual after a comment": "/* x */ virtual report\n@@\n@@\n*kfree(...);\n",
    "initialize over lines": "@initialize\n:\nocaml@\n@@\nlet _ = 1\n\n@@\n@@\n*kfree(...);\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_rule_that_could_run_code_or_read_a_file_is_refused_naming_its_line(name):
    with pytest.raises(RuleRefused, match=r"^line \d+ of the rule \(.*\): .*; write a rule without it$"):
        check(HOSTILE[name])


def test_a_rule_that_marks_nothing_is_refused_with_what_to_do():
    with pytest.raises(RuleRefused, match=r"marks no line with \*"):
        check("@@\nexpression E;\n@@\nkfree(E);\n")
    with pytest.raises(RuleRefused, match="over 16,384"):
        check("@@\n@@\n*kfree(x);\n" + "// padding\n" * 2000)
