target/peers/franz-go-perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796062905-11157-c-1-100 --num-records 500000
