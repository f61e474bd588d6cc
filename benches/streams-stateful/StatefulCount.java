// The Kafka Streams peer of purekafka's stateful DSL (issue #16): the same
// counts, computed by org.apache.kafka:kafka-streams, for the side-by-side
// test (integration/streams/stateful_java.rs) and the count benchmark
// (benches/streams-stateful/run).
//
//   StatefulCount windowed BOOTSTRAP APP INPUT OUTPUT RECORDS SIZE_MS GRACE_MS STATE_DIR
//     groupByKey().windowedBy(TimeWindows.ofSizeAndGrace(size, grace)).count(),
//     the record cache off (every update is forwarded, as ours does); each
//     update goes to OUTPUT as key "k@start", value "k@start=count".
//   StatefulCount count BOOTSTRAP INPUT OUTPUT RECORDS CACHE_BYTES
//     groupByKey().count() into a persistent (RocksDB) store, the updates to
//     OUTPUT as String/Long; CACHE_BYTES is statestore.cache.max.bytes (Kafka
//     Streams' default is 10485760; 0 forwards every update). Prints one
//     RESULT line: throughput from the first record counted to the last, the
//     JVM's process CPU over that span and over its whole life.
//
// Both stop after RECORDS records have reached the count and close(), which
// flushes the producer, commits and exits. At-least-once, one stream thread,
// commit.interval.ms 100, auto.offset.reset earliest.

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

public final class StatefulCount {
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static void usage() {
        System.err.println("usage: StatefulCount windowed BOOTSTRAP APP INPUT OUTPUT RECORDS SIZE_MS GRACE_MS STATE_DIR");
        System.err.println("       StatefulCount count BOOTSTRAP INPUT OUTPUT RECORDS CACHE_BYTES");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        boolean windowed = args[0].equals("windowed");
        if (windowed ? args.length != 9 : !args[0].equals("count") || args.length != 6) {
            usage();
        }
        String bootstrap = args[1];
        String app = windowed ? args[2] : "ks-count-" + Long.toHexString(System.nanoTime());
        int at = windowed ? 3 : 2;
        String input = args[at], output = args[at + 1];
        long records = Long.parseLong(args[at + 2]);

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.STATE_DIR_CONFIG, windowed
                ? args[8] : Files.createTempDirectory("ks-count").toString());
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG,
                windowed ? 0L : Long.parseLong(args[5]));

        AtomicLong seen = new AtomicLong();
        AtomicLong first = new AtomicLong(), last = new AtomicLong();
        AtomicLong cpuFirst = new AtomicLong(), cpuLast = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);

        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> in = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((k, v) -> {
                    long n = seen.incrementAndGet();
                    if (n == 1) {
                        first.set(System.nanoTime());
                        cpuFirst.set(cpuNanos());
                    }
                    if (n == records) {
                        last.set(System.nanoTime());
                        cpuLast.set(cpuNanos());
                        done.countDown();
                    }
                });
        if (windowed) {
            TimeWindows windows = TimeWindows.ofSizeAndGrace(
                    Duration.ofMillis(Long.parseLong(args[6])),
                    Duration.ofMillis(Long.parseLong(args[7])));
            in.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                    .windowedBy(windows)
                    .count(Materialized.with(Serdes.String(), Serdes.Long()))
                    .toStream()
                    .map((w, n) -> {
                        String k = w.key() + "@" + w.window().start();
                        return KeyValue.pair(k, k + "=" + n);
                    })
                    .to(output, Produced.with(Serdes.String(), Serdes.String()));
        } else {
            in.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                    .count(Materialized.with(Serdes.String(), Serdes.Long()))
                    .toStream()
                    .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        }

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.start();
        boolean ok = done.await(300, TimeUnit.SECONDS);
        streams.close(Duration.ofSeconds(60));
        if (!ok) {
            System.err.println("timed out: " + seen.get() + " of " + records + " records");
            System.exit(1);
        }
        double span = (last.get() - first.get()) / 1e9;
        double cpuSpan = (cpuLast.get() - cpuFirst.get()) / 1e9;
        System.out.printf("RESULT peer=kafka-streams mode=%s records=%d rec_s=%.0f span_s=%.3f "
                        + "cpu_span_s=%.3f cpu_total_s=%.3f%n",
                args[0], records, (records - 1) / span, span, cpuSpan, cpuNanos() / 1e9);
        System.exit(0);
    }
}
