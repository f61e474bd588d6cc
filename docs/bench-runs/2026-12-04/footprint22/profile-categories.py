import collections,sys
path=sys.argv[1]
cats=[('the worker (Shared::work, its own code)','Shared>::work::'),
('the Key-mode queue (TaskQueue push/take/finish: key map, ready heap, slots)','TaskQueue<T>::'),
('the stage futures (Processing, Sunk, MapOk / then, apply_async, map_async)','Processing as core|Sunk<|MapOk<|topology::Pipeline<K,V>::then|apply_async|map_async'),
('the producer append (try_enqueue / enqueue, accumulator)','Producer::try_enqueue|Producer::enqueue|accumulator::Accumulator::append|producer::Shared::append'),
('tokio timer (wheel insert/poll, Sleep)','time::wheel|Sleep as|process_at_time|time::<impl'),
('tokio scheduling (wake, run queue, park/unpark, futex)','transition_to_notified|queue::Local|park|futex|wake_by_val|try_to_wake_up'),
('malloc/free','malloc|cfree|_int_free|_int_malloc|unlink_chunk'),
]
import re
n=0; c=collections.Counter(); cur=[]
def flush():
    global n
    if not cur: return
    n+=1
    stack=' | '.join(l.split(None,1)[1] if len(l.split(None,1))>1 else '' for l in cur)
    for name,pat in cats:
        if re.search(pat, stack): c[name]+=1
for line in open(path):
    if not line.strip(): flush(); cur=[]; continue
    if line[0].isspace(): cur.append(line.strip())
flush()
print(path, n)
for name,_ in cats: print(f"{100*c[name]/n:5.1f}% {name}")
