# malloc/free leaf samples by the first caller outside the allocator.
import re, sys, collections
samples = []; cur = None
for line in open(sys.argv[1], errors="replace"):
    if not line.strip():
        if cur is not None: samples.append(cur); cur = None
        continue
    if not line.startswith("\t"): cur = []; continue
    p = line.strip().split(None, 1); cur.append(p[1] if len(p) > 1 else "?")
if cur: samples.append(cur)
n = len(samples)
alloc = re.compile(r"^(malloc|_int_malloc|_int_free|cfree|unlink_chunk|malloc_consolidate|__GI___libc|_int_realloc|realloc|free|__rustc|alloc::|<alloc::|core::ptr::drop_in_place|<streams_stateful_bench::CountingAlloc)")
leaf = re.compile(r"(malloc|_int_malloc|_int_free|cfree|unlink_chunk|malloc_consolidate|__GI___libc|realloc)")
c = collections.Counter()
for s in samples:
    if not s or not leaf.match(s[0]): continue
    i = 0
    while i < len(s) and alloc.match(s[i]): i += 1
    c[s[i][:120] if i < len(s) else "?"] += 1
print(f"malloc/free leaf: {100*sum(c.values())/n:.1f}% of {n} samples")
for k, v in c.most_common(20): print(f"{100*v/n:5.2f}% {k}")
