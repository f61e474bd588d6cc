#!/bin/sh
# alternate base and branch: 10 ms / 10,000 in flight, 200k records
cd <run dir>
for i in 1 2; do  # run twice: rounds 1-2, then 3-4
  for v in base calls18; do
    if [ $v = base ]; then b=<base streams_bench>; else b=<calls18 streams_bench>; fi
    cat /proc/loadavg > calls-$v-$i.txt
    STREAMS_BENCH_RECORDS=200000 STREAMS_BENCH_CASES=10/10000 $b 127.0.0.1:19092 calls >> calls-$v-$i.txt 2>&1
    cat /proc/loadavg >> calls-$v-$i.txt
  done
done
