target/peers/rdkafka/release/rdkafka-perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796380639-22884-c-6-1024 --num-records 1000000
