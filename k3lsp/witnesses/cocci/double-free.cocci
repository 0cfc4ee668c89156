// A pointer freed twice on one path, with no assignment in between (CWE-415).
virtual report

@r depends on report@
expression E, E2;
position p1, p2;
@@
free@p1(E);
... when != E = E2
    when strict
free@p2(E);

@script:python depends on report@
p1 << r.p1;
p2 << r.p2;
@@
coccilib.report.print_report(p2[0], "coccinelle.double-free: freed again after the free on line %s" % p1[0].line)
