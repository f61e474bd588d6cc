target/peers/rdkafka/release/rdkafka-perf produce --bootstrap-server 127.0.0.1:19092 --topic p2-p99-6811-3-rdkafka --num-records 300000 --record-size 1024 --acks 1 --compression none
