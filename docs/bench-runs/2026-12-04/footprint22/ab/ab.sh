#!/bin/bash
# ab.sh OUTDIR PAIRS binA binB ... : alternate binaries, 10/10000 case, 600k records
out=$1; pairs=$2; shift 2
mkdir -p $out
for p in $(seq 1 $pairs); do
  for b in "$@"; do
    n=$(basename $b)
    STREAMS_BENCH_RECORDS=${RECORDS:-600000} STREAMS_BENCH_CASES=${CASES:-10/10000} timeout 900 $b 127.0.0.1:19092 calls > $out/$n-$p.txt 2>&1
    echo "$n $p: $(grep -E '^10 ms call|^100 ms call' $out/$n-$p.txt | sed 's/  */ /g') | $(grep -o 'RSS growth [0-9]* bytes' $out/$n-$p.txt | tr '\n' ' ') load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
