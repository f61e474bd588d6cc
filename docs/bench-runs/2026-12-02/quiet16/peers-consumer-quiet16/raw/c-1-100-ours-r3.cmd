<build of c7713c08>/purekafka perf consume --bootstrap-server 127.0.0.1:19092 --topic peers-1796229773-18038-c-1-100 --messages 2000000 --json
