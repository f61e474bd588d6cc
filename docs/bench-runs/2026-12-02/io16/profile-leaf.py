# The leaf functions and 4-frame call chains of the samples with a frame matching argv[2]
# (and none matching argv[3]); input: `perf script -F comm,tid,ip,sym` output.
import sys, collections, re
samples=[]; cur=None
for line in open(sys.argv[1], errors="replace"):
    if not line.strip():
        if cur is not None: samples.append(cur); cur=None
        continue
    if not line.startswith("\t"): cur=[]; continue
    parts=line.strip().split(None,1); cur.append(parts[1] if len(parts)>1 else "?")
if cur: samples.append(cur)
n=len(samples)
must=re.compile(sys.argv[2]); excl=re.compile(sys.argv[3]) if len(sys.argv)>3 else None
leaf=collections.Counter(); path=collections.Counter()
for s in samples:
    if not any(must.search(f) for f in s): continue
    if excl and any(excl.search(f) for f in s): continue
    leaf[s[0][:110]]+=1
    # chain of 4 frames from leaf
    path[" <- ".join(x[:60] for x in s[:4])]+=1
for k,v in leaf.most_common(25): print(f"{100*v/n:5.1f}% {k}")
print()
for k,v in path.most_common(25): print(f"{100*v/n:5.1f}% {k}")
