# The per-test medians of a benches/fake-vs-real/run output directory (run in it),
# split by whether a test takes as long on the real broker as on the fake.
import re,statistics,sys
from collections import defaultdict
def times(f):
    d={}
    for l in open(f,errors='replace'):
        m=re.match(r'^test (\S+) \.\.\. ok <([\d.]+)s>',l)
        if m: d[m.group(1)]=float(m.group(2))
    return d
fk=[times(f'round{r}-a-fake.txt') for r in (1,2,3)]
rl=[times(f'round{r}-a-real.txt') for r in (1,2,3)]
names=set(fk[0])
med=lambda ds,n: statistics.median(d[n] for d in ds)
rows=[(n,med(fk,n),med(rl,n)) for n in names]
S='same on both (real/fake < 1.5)'; F='faster on the fake (>= 1.5)'
cats={S:[],F:[]}
for n,f,r in rows:
    cats[S if r < 1.5*f else F].append((n,f,r))
for k,v in cats.items():
    print(k, len(v), round(sum(x[1] for x in v),1), round(sum(x[2] for x in v),1))
print('all', len(rows), round(sum(x[1] for x in rows),1), round(sum(x[2] for x in rows),1))
same=cats[S]
print('same, fake >= 1.5 s:')
for n,f,r in sorted(same,key=lambda x:-x[1]):
    if f>=1.5: print(f'  {f:.2f} {r:.2f} {n}')
g=defaultdict(lambda:[0,0,0])
for n,f,r in same:
    m=n.split('::')[0] if not n.startswith('producer::idle') else 'producer::idle'
    g[m][0]+=1; g[m][1]+=f; g[m][2]+=r
for m,(c,f,r) in sorted(g.items(),key=lambda x:-x[1][1]): print(f'  {m}: {c} tests, {f:.1f} / {r:.1f}')
print('faster on fake, top:')
for n,f,r in sorted(cats[F],key=lambda x:-x[2])[:12]: print(f'  {f:.2f} {r:.2f} {n}')
