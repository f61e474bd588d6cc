target/release/purekafka perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796380639-22884-c-6-100 --messages 1000000 --json
