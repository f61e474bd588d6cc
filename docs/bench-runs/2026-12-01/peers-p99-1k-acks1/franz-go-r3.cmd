target/peers/franz-go-perf produce --bootstrap-server 127.0.0.1:19092 --topic p2-p99-5720-3-franz-go --num-records 1000000 --record-size 1024 --acks 1 --compression none
