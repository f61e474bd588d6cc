import sys,re,collections
samples=[];cur=None;t=None
for line in open(sys.argv[1],errors='replace'):
    if not line.strip():
        if cur is not None: samples.append((t,cur)); cur=None
        continue
    if not line.startswith((' ','\t')):
        m=re.search(r'(\d+\.\d+):',line); t=float(m.group(1)); cur=[]; continue
    p=line.strip().split(' ',1)
    if cur is not None: cur.append(p[1] if len(p)>1 else '?')
start=max(t for t,s in samples if any("fill_passthrough" in f for f in s))
sel=[s for t,s in samples if t>=start]
print(len(samples),'total',len(sel),'in streams phase')
c=collections.Counter(s[0][:100] for s in sel if s)
for k,v in c.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 30): print(f"{100*v/len(sel):5.2f}% {k}")
# inclusive by function substring
pats=sys.argv[3:] 
for p in pats:
    n=sum(1 for s in sel if any(re.search(p,f) for f in s))
    print(f"incl {100*n/len(sel):5.2f}% {p}")
import os
leaf=os.environ.get('LEAF')
if leaf:
    skip=re.compile(r'^(__mem|core::|alloc::|std::|<alloc|<core|tokio::runtime::task|\[unknown\]|0x|load<|drop_in_place|drop<|release_shared|fetch_sub|deallocate)')
    hits=[s for s in sel if s and re.search(leaf,s[0])]
    c=collections.Counter()
    for s in hits:
        fr=[f for f in s[1:] if not skip.search(f)][:2]
        c[' <- '.join(f[:90] for f in fr)]+=1
    print('callers of',leaf)
    for k,v in c.most_common(20): print(f"{100*v/len(sel):5.2f}%  {k}")
