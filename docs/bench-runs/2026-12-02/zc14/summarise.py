import re,glob,sys,statistics as st
d=sys.argv[1]; names=sys.argv[2:]
rows={}
for n in names:
    for f in sorted(glob.glob(f"{d}/passthrough-{n}-[0-9]*.txt"), key=lambda x:int(re.search(r'-(\d+)\.txt',x).group(1))):
        t=open(f).read(); r=int(re.search(r'-(\d+)\.txt',f).group(1))
        g=lambda pat: float(re.search(pat,t).group(1)) if re.search(pat,t) else float('nan')
        load=re.search(r'load: ([\d.]+)',t).group(1)
        rows.setdefault(r,{})[n]=(load,g(r'plain consume.*?CPU\s+([\d.]+)'),g(r'at-least-once.*?CPU\s+([\d.]+)'),g(r'exactly-once.*?CPU\s+([\d.]+)'),g(r'own cost = .*?= ([\d.]+)'),g(r'at-least-once \(sync commits\)\s+(\d+) rec/s'))
print("round | "+" | ".join(f"{n}: load, plain, ALO, EOS, own, ALO rec/s" for n in names))
for r in sorted(rows):
    print(r, " | ".join(f"{rows[r][n]}" if n in rows[r] else "-" for n in names))
for n in names:
    v=[rows[r][n] for r in rows if n in rows[r]]
    print(n, "medians: plain %.2f ALO %.2f EOS %.2f own %.2f ALO rec/s %d (n=%d)"%(st.median(x[1] for x in v),st.median(x[2] for x in v),st.median(x[3] for x in v),st.median(x[4] for x in v),st.median(x[5] for x in v),len(v)))
