<build of c7713c08>/purekafka perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796229809-18356-c-1-1024 --messages 1000000 --json
