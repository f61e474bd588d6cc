target/peers/franz-go-perf produce --bootstrap-server 127.0.0.1:19092 --topic p2-p99-6811-3-franz-go --num-records 300000 --record-size 1024 --acks 1 --compression none
