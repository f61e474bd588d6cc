target/release/purekafka perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796062905-11157-c-1-100 --messages 500000 --json
