// The result of an allocation dereferenced before any check against NULL (CWE-690).
virtual report

@r depends on report@
type T;
identifier x, F;
identifier alloc = {malloc, calloc, realloc, kmalloc, kzalloc, kcalloc, kmalloc_array, vmalloc, vzalloc};
position p;
@@
(
T *x = alloc(...);
|
x = alloc(...);
)
... when != x
(
x@p->F
|
x@p[...]
)

@script:python depends on report@
p << r.p;
@@
coccilib.report.print_report(p[0], "coccinelle.unchecked-alloc: the allocation's result is used before it is checked")
