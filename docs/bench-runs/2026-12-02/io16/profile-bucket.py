# Samples per top-level component (the first matching frame from the root) and, inside the
# record workers, per sub-component; input: `perf script -F comm,tid,ip,sym` output.
import sys, collections, re
# Buckets each sample by the first matching frame from the root down to the leaf
# (outermost component), and separately by leaf.
cats = [
 ("commit: flush caches", r"flush_caches|flush_cache"),
 ("commit: checkpoint/store flush", r"write_checkpoint|KeyValueStore>::flush"),
 ("commit: other", r"runtime::commit::"),
 ("poll loop / accept", r"poll_loop|Shared::accept"),
 ("dispatch", r"Shared::dispatch|dispatch_loop"),
 ("producer sender/net", r"producer::sink|Sender|net::connection|producer::sender"),
 ("consumer fetcher", r"consumer::fetcher|FetchTask"),
 ("settle (acks)", r"Shared::settle|Acks as"),
 ("timer driver", r"time::Driver|process_at_time|Wheel::poll"),
 ("worker", r"Shared>::work"),
 ("runtime threads, other (parking, scheduler: tokio starts them on its blocking pool)", r"blocking::pool"),
]
sub = [
 ("store get (cache miss)", r"PersistentStore as .*KeyValueStore>::get"),
 ("store stage/commit (redb write)", r"PersistentStore::commit|PersistentStore::stage|redb::"),
 ("RecordCache::update", r"RecordCache::update"),
 ("cache evict/write out", r"write_out_locally|RecordCache::evict"),
 ("changelog send", r"send_to_changelog"),
 ("sink send (output)", r"Producer::send_tagged|Producer::send"),
 ("serde", r"serialize|deserialize|Serializer|Deserializer"),
 ("map_async/sleep", r"map_async|Sleep as|apply_async"),
 ("key queue", r"TaskQueue"),
 ("malloc/free", r"malloc|free|_int_"),
]
samples=[]; cur=None
for line in open(sys.argv[1], errors="replace"):
    if not line.strip():
        if cur is not None: samples.append(cur); cur=None
        continue
    if not line.startswith("\t"):
        cur=[]; continue
    parts=line.strip().split(None,1)
    cur.append(parts[1] if len(parts)>1 else "?")
if cur: samples.append(cur)
n=len(samples)
top=collections.Counter(); inner=collections.Counter()
for s in samples:
    root_first=list(reversed(s))
    c="other"
    for name,rx in cats:
        if any(re.search(rx,f) for f in root_first): c=name; break
    top[c]+=1
    if c=="worker":
        sc="worker: other"
        for name,rx in sub:
            if any(re.search(rx,f) for f in s): sc="worker: "+name; break
        inner[sc]+=1
print("samples",n)
for k,v in top.most_common(): print(f"{100*v/n:6.1f}%  {k}")
print()
for k,v in inner.most_common(): print(f"{100*v/n:6.1f}%  {k}")
