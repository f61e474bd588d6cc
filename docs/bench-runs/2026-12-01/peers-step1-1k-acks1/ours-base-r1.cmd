target/peers/purekafka-base perf produce --bootstrap-server 127.0.0.1:19092 --topic p2-p99-29664-1-ours-base --num-records 500000 --record-size 1024 --acks 1 --compression none --json
