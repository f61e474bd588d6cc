target/peers/rdkafka/release/rdkafka-perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796072689-8904-c-6-100 --num-records 1000000
