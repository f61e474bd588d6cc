#!/usr/bin/env python3
# benches/peers/heap-sites.py: bytes and calls per allocation site, per
# record, from a heaptrack data file (issue #21). heaptrack_print counts
# calls only; this sums the sizes too (a realloc counts its new size, as
# the counting allocator of examples/streams_bench.rs does).
#
#   heaptrack -o run target/release/examples/streams_bench BOOTSTRAP plain INPUT
#   benches/peers/heap-sites.py run.zst RECORDS [DEPTH [TOP [FRAME]]]
#
# A site is the first DEPTH frames in this repository's sources (src/,
# examples/, vendor/kafka-protocol); FRAME prints the deepest stacks whose
# first three frames contain it. HEAP_SITES_EXCLUDE=NAME leaves out every
# allocation with a frame containing NAME (e.g. `fill_passthrough_input`:
# the `once` mode's input fill, outside the counted run).
import os, sys, subprocess, collections
path = sys.argv[1]; records = float(sys.argv[2]); depth = int(sys.argv[3]) if len(sys.argv) > 3 else 3
strings = [None]; ips = [None]; traces = [(0, 0)]; infos = []
b = collections.Counter(); c = collections.Counter()
p = subprocess.Popen(['zstdcat', path], stdout=subprocess.PIPE, text=True, errors='replace')
for line in p.stdout:
    k = line[:1]
    if k == 's':
        strings.append(line[2:].rstrip('\n').split(' ', 1)[1] if ' ' in line[2:] else '')
    elif k == 'i':
        f = line.split()[1:]
        frames = []
        rest = f[2:]
        while len(rest) >= 3:
            fn, fl, ln = int(rest[0], 16), int(rest[1], 16), int(rest[2], 16)
            frames.append(f"{strings[fn]}@{(strings[fl] or '').split('/src/', 1)[-1] if '/rustc/' not in (strings[fl] or '') and '.cargo/' not in (strings[fl] or '') else (strings[fl] or '')}:{ln}")
            rest = rest[3:]
        ips.append(frames)
    elif k == 't':
        _, ip, parent = line.split(); traces.append((int(ip, 16), int(parent, 16)))
    elif k == 'a':
        _, size, t = line.split(); infos.append((int(size, 16), int(t, 16)))
    elif k == '+':
        size, t = infos[int(line.split()[1], 16)]
        b[t] += size; c[t] += 1
def stack(t):
    out = []
    while t:
        ip, parent = traces[t]
        fr = ips[ip] if ip < len(ips) else []
        # inlined frames are listed innermost first? keep order
        out.extend(reversed(fr) if False else fr)
        t = parent
    return out
skip = ('alloc::', 'core::', 'bytes::', 'std::', '<alloc', '<core', '<bytes', 'hashbrown', 'tokio::', '<tokio', 'indexmap', '__rust', 'heaptrack', 'malloc', 'realloc', 'do_reserve', 'grow_', 'finish_grow', 'reserve', 'with_capacity', 'allocate', 'alloc_impl', 'box_new', 'new<', 'push<', 'extend', 'from_iter', 'collect', 'clone', 'to_vec', 'spec_', 'into_vec', 'format', 'Vec', 'insert', 'try_', 'realloc')
exclude = os.environ.get('HEAP_SITES_EXCLUDE')
if exclude:
    for t in [t for t in b if any(exclude in x for x in stack(t))]:
        del b[t]; del c[t]
sites = collections.Counter(); scount = collections.Counter()
for t in b:
    s = stack(t)
    ours = [x for x in s if ('@src/' in x or '@examples/' in x or 'kafka-protocol' in x)]
    key = ' <- '.join(ours[:depth]) if ours else ' <- '.join(s[:4])
    sites[key] += b[t]; scount[key] += c[t]
tot = sum(b.values()); totc = sum(c.values())
print(f"total {tot/records:.0f} B/record, {totc/records:.2f} allocs/record over {records:.0f} records")
for k, v in sites.most_common(int(sys.argv[4]) if len(sys.argv) > 4 else 25):
    print(f"{v/records:8.1f} B {scount[k]/records:6.3f} allocs  {k[:400]}")
if len(sys.argv) > 5:
    pat = sys.argv[5]
    agg = collections.Counter(); ac = collections.Counter()
    for t in b:
        s = stack(t)
        if any(pat in x for x in s[:3]):
            key = ' <- '.join(x for x in s[:14])
            agg[key] += b[t]; ac[key] += c[t]
    for k, v in agg.most_common(4):
        print(f"\n{v/records:8.1f} B {ac[k]/records:6.3f} allocs\n  " + k.replace(' <- ', '\n  '))
