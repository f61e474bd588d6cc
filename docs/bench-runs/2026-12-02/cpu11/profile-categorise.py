import sys, collections, re
# Categorise perf-script samples (leaf first) by component; also the callers of memmove/malloc/free.
def samples(path):
    cur=[]
    for line in open(path, errors='replace'):
        if not line.strip():
            if cur: yield cur
            cur=[]; continue
        if not line.startswith('\t') and not line.startswith(' '):
            cur=[]; continue
        parts=line.strip().split(' ',1)
        cur.append(parts[1] if len(parts)>1 else parts[0])
    if cur: yield cur
RULES=[
 ('bench: bare timer', r'bare_timer'),
 ('bench: input fill / produce', r'fill_passthrough_input|streams_bench::produce'),
 ('bench: the call (map_async closure body)', r'ours_timed::\{\{closure\}\}::\{\{closure\}\}|Overshoot'),
 ('runtime: dispatcher', r'Shared::dispatch|dispatch_loop'),
 ('runtime: accept (poll loop)', r'Shared::accept|poll_loop'),
 ('runtime: settle (acks)', r'Shared::settle|Acks as purekafka::producer'),
 ('runtime: commit', r'runtime::commit|commit_sync'),
 ('runtime: worker', r'runtime::worker'),
 ('producer', r'purekafka::producer'),
 ('consumer', r'purekafka::consumer'),
 ('net', r'purekafka::net'),
]
LEAF=[
 ('tokio timer', r'tokio::runtime::time|tokio::time'),
 ('tokio scheduler/tasks', r'tokio::runtime::(scheduler|task)|tokio::runtime::context'),
 ('alloc', r'malloc|_int_free|^free|cfree|_int_realloc|realloc|malloc_consolidate'),
 ('memmove', r'memmove|memcpy'),
 ('key map/scheduler', r'scheduler::TaskQueue|hashbrown|binary_heap|sip::Hasher'),
 ('watermark', r'watermark'),
 ('mutex', r'futex|Mutex|lock_contended|raw_mutex'),
 ('clock', r'clock_gettime|Instant'),
 ('kernel', r'^\[k\]|^ffffffff|entry_SYSCALL|do_syscall'),
]
path=sys.argv[1]; tot=0
comp=collections.Counter(); leaf=collections.Counter(); both=collections.Counter()
callers=collections.defaultdict(collections.Counter)
for s in samples(path):
    tot+=1
    c='other'
    for name,rx in RULES:
        if any(re.search(rx,f) for f in s): c=name; break
    l='other leaf: '+s[0][:60]
    for name,rx in LEAF:
        if re.search(rx,s[0]): l=name; break
    comp[c]+=1; leaf[l]+=1; both[(c,l)]+=1
    if l in ('memmove','alloc'):
        for f in s[1:]:
            if not re.search(r'memmove|malloc|free|alloc::|core::ptr|RawVec|Box|__rust|realloc|clone',f):
                callers[l][f[:110]]+=1; break
print('samples',tot)
for k,v in comp.most_common(): print(f'{100*v/tot:5.1f}%  {k}')
print('--- leaf')
for k,v in leaf.most_common(25): print(f'{100*v/tot:5.1f}%  {k}')
print('--- component x leaf (top)')
for k,v in both.most_common(30): print(f'{100*v/tot:5.1f}%  {k}')
for l in callers:
    print('--- callers of',l)
    for k,v in callers[l].most_common(12): print(f'{100*v/tot:5.1f}%  {k}')
