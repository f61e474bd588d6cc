#!/usr/bin/env bash
# 1 KiB acks=1, 1 partition, interleaved rounds of VARIANTS (ours = $OURS, ours-bm8/bm2 = with
# buffer.memory 8/2 MiB, ours-base/step1/step2 = copies of earlier release builds kept in
# target/peers/, rdkafka, franz-go); usage: run.sh OUTDIR; N and ROUNDS from the environment.
set -u
ROOT="$(git rev-parse --show-toplevel)"
OURS=${OURS:-$ROOT/target/release/purekafka}
FRANZ=$ROOT/target/peers/franz-go-perf
RDK=$ROOT/target/peers/rdkafka/release/rdkafka-perf
B=127.0.0.1:19092
OUT=$1; N=${N:-1000000}; ROUNDS=${ROUNDS:-3}; VARIANTS=${VARIANTS:-"ours ours-bm8 rdkafka franz-go"}
mkdir -p "$OUT"
uptime > "$OUT/machine.txt"
for r in $(seq 1 $ROUNDS); do
  for v in $VARIANTS; do
    t=p2-p99-$$-$r-$v
    "$OURS" topics create -b $B "$t" --partitions 1 --replication-factor 1 >/dev/null
    common=(--bootstrap-server $B --topic "$t" --num-records $N --record-size 1024 --acks 1 --compression none)
    case $v in
      ours) cmd=("$OURS" perf produce "${common[@]}" --json) ;;
      ours-bm8) cmd=("$OURS" perf produce "${common[@]}" --json --producer-property buffer.memory=8388608) ;;
      ours-bm2) cmd=("$OURS" perf produce "${common[@]}" --json --producer-property buffer.memory=2097152) ;;
      ours-base) cmd=("$ROOT/target/peers/purekafka-base" perf produce "${common[@]}" --json) ;;
      ours-step1) cmd=("$ROOT/target/peers/purekafka-step1" perf produce "${common[@]}" --json) ;;
      ours-step2) cmd=("$ROOT/target/peers/purekafka-step2" perf produce "${common[@]}" --json) ;;
      ours-rate) cmd=("$OURS" perf produce "${common[@]}" --json --throughput 1000) ;;
      rdkafka) cmd=("$RDK" produce "${common[@]}") ;;
      franz-go) cmd=("$FRANZ" produce "${common[@]}") ;;
    esac
    echo "${cmd[*]}" > "$OUT/$v-r$r.cmd"
    /usr/bin/time -f '%U %S %M' -o "$OUT/$v-r$r.time" "${cmd[@]}" > "$OUT/$v-r$r.out" 2> "$OUT/$v-r$r.err"
    "$OURS" topics delete -b $B "$t" >/dev/null 2>&1
    printf '%s r%s %s cpu=%s\n' "$v" "$r" "$(jq -c '{rps:(.records_per_sec|floor),l:.latency_ms}' "$OUT/$v-r$r.out" 2>/dev/null)" "$(cat "$OUT/$v-r$r.time" | tail -1)"
  done
done
uptime >> "$OUT/machine.txt"
