target/peers/franz-go-perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796381201-555-c-1-1024 --num-records 1000000
