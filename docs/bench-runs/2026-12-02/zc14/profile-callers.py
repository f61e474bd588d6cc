import sys, collections, re
# Parse perf script output: sample header line then stack lines (ip sym), blank between.
samples=[]; cur=None
for line in open(sys.argv[1], errors='replace'):
    line=line.rstrip('\n')
    if not line.strip():
        if cur is not None: samples.append(cur); cur=None
        continue
    if not line.startswith((' ','\t')):
        cur=[]; continue
    parts=line.strip().split(' ',1)
    sym=parts[1] if len(parts)>1 else '?'
    if cur is not None: cur.append(sym)
if cur: samples.append(cur)
leafpat=sys.argv[2]
n=len(samples); hits=[s for s in samples if s and re.search(leafpat,s[0])]
print(f"{len(hits)}/{n} samples = {100*len(hits)/max(n,1):.1f}% leaf ~ {leafpat}")
c=collections.Counter()
skip=re.compile(r'^(__mem|core::|alloc::|std::|<alloc|<core|tokio::runtime::task|\[unknown\]|0x)')
for s in hits:
    frames=[f for f in s[1:] if not skip.search(f)][:int(sys.argv[3]) if len(sys.argv)>3 else 3]
    c[' <- '.join(f[:110] for f in frames)]+=1
for k,v in c.most_common(25): print(f"{100*v/n:5.2f}%  {k}")
