import sys, re, collections
# Keep only samples in 200 ms windows where the streams runtime ran and the bare timer did not; write them out.
path, out = sys.argv[1], sys.argv[2]
samples=[]; cur=None
for line in open(path, errors='replace'):
    if not line.strip():
        if cur: samples.append(cur)
        cur=None; continue
    if not line[0].isspace():
        m=re.search(r'(\d+\.\d+):', line)
        cur=[float(m.group(1)) if m else 0.0, line, []]; continue
    if cur is not None: cur[2].append(line)
if cur: samples.append(cur)
W=0.2
win=collections.defaultdict(lambda:[0,0,0])
for t,h,st in samples:
    w=int(t/W); s=''.join(st)
    win[w][0]+=1
    if 'runtime::worker' in s or 'Shared::settle' in s: win[w][1]+=1
    if 'bare_timer' in s or 'fill_passthrough' in s: win[w][2]+=1
keep={w for w,(n,r,b) in win.items() if r>0 and b==0}
n=0
with open(out,'w') as f:
    for t,h,st in samples:
        if int(t/W) in keep:
            n+=1; f.write(h); f.writelines(st); f.write('\n')
print('kept',n,'of',len(samples),'windows',len(keep))
