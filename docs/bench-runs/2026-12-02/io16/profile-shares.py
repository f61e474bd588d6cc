# Share of samples with a frame matching each pattern anywhere in the stack
# (inclusive), from `perf script -F comm,tid,ip,sym` output.
import re, sys
samples = []; cur = None
for line in open(sys.argv[1], errors="replace"):
    if not line.strip():
        if cur is not None: samples.append(cur); cur = None
        continue
    if not line.startswith("\t"): cur = []; continue
    p = line.strip().split(None, 1); cur.append(p[1] if len(p) > 1 else "?")
if cur: samples.append(cur)
n = len(samples)
def share(rx):
    r = re.compile(rx)
    return 100 * sum(1 for s in samples if any(r.search(f) for f in s)) / n
print("samples", n)
for name, rx in [
    ("spawn (tokio::spawn, bind_new_task)", r"task::spawn|spawn_inner|bind_new_task|OwnedTasks"),
    ("task end (ShardedList, dealloc)", r"ShardedList|Harness.*dealloc|Harness.*complete|drop_join_handle"),
    ("wake-ups (wake, schedule, notified)", r"wake_by_val|wake_by_ref|schedule_task|transition_to_notified"),
    ("park/unpark", r"park_internal|Unparker|unpark"),
    ("dispatcher Notify", r"Notify::notify|notify_one|notify_waiters"),
    ("timer driver", r"time::Driver|process_at_time|Wheel::poll"),
    ("sleep poll/register", r"Sleep as|TimerEntry|reregister"),
    ("clock reads", r"clock_gettime"),
    ("redb (all)", r"redb::"),
    ("store get (cache miss)", r"PersistentStore as .*::get"),
    ("commit: flush_caches", r"flush_caches"),
    ("commit: write_checkpoint", r"write_checkpoint"),
    ("changelog send", r"send_to_changelog"),
    ("Producer send (all)", r"Producer::send|send_tagged|append_now"),
    ("consumer fetcher", r"consumer::fetcher"),
    ("settle (acks)", r"Shared::settle"),
    ("latency histogram", r"hdrhistogram|LatencyHistogram"),
]:
    print(f"{share(rx):5.1f}%  {name}")
