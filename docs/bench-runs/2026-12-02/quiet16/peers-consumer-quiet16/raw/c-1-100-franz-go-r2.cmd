target/peers/franz-go-perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796229773-18038-c-1-100 --num-records 2000000
