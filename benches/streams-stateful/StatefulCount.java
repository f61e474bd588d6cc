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
//   StatefulCount restore BOOTSTRAP APP INPUT ENTRIES
//     groupByKey().count() as application APP into the persistent store
//     "counts", from a fresh state dir, so the store is restored from the
//     whole changelog APP-counts-changelog (filled by the Rust side's
//     `changelog`). Prints one RESULT line: the time from start() to ENTRIES
//     records restored (a restore listener), from the first restore start
//     to then, and the JVM's process CPU over the first span; then closes.
//   StatefulCount io BOOTSTRAP INPUT OUTPUT RECORDS LOOKUP_MS
//     the I/O-bound pipeline: a blocking LOOKUP_MS lookup (Thread.sleep in
//     mapValues; Kafka Streams processes one record at a time per thread)
//     then groupByKey().count(), the updates to OUTPUT. RESULT as count.
//
// count, windowed and io stop after RECORDS records have reached the count
// and close(), which flushes the producer, commits and exits. At-least-once,
// one stream thread, commit.interval.ms 100, auto.offset.reset earliest.

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.TopicPartition;
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
import org.apache.kafka.streams.processor.StateRestoreListener;

public final class StatefulCount {
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static void usage() {
        System.err.println("usage: StatefulCount windowed BOOTSTRAP APP INPUT OUTPUT RECORDS SIZE_MS GRACE_MS STATE_DIR");
        System.err.println("       StatefulCount count BOOTSTRAP INPUT OUTPUT RECORDS CACHE_BYTES");
        System.err.println("       StatefulCount restore BOOTSTRAP APP INPUT ENTRIES");
        System.err.println("       StatefulCount io BOOTSTRAP INPUT OUTPUT RECORDS LOOKUP_MS");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            usage();
        }
        if (args[0].equals("restore")) {
            if (args.length != 5) {
                usage();
            }
            restore(args[1], args[2], args[3], Long.parseLong(args[4]));
            return;
        }
        boolean io = args[0].equals("io");
        if (io) {
            if (args.length != 6) {
                usage();
            }
            args = new String[] {"io", args[1], args[2], args[3], args[4], "10485760", args[5]};
        }
        boolean windowed = args[0].equals("windowed");
        if (!io && (windowed ? args.length != 9 : !args[0].equals("count") || args.length != 6)) {
            usage();
        }
        String bootstrap = args[1];
        String app = windowed ? args[2]
                : (io ? "ks-io-" : "ks-count-") + Long.toHexString(System.nanoTime());
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
        KStream<String, String> in = b.stream(input, Consumed.with(Serdes.String(), Serdes.String()));
        if (io) {
            long lookup = Long.parseLong(args[6]);
            in = in.mapValues(v -> {
                try {
                    Thread.sleep(lookup);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return v;
            });
        }
        in = in.peek((k, v) -> {
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

    private static void restore(String bootstrap, String app, String input, long entries)
            throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        p.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("ks-restore").toString());

        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, org.apache.kafka.streams.state.KeyValueStore<
                        org.apache.kafka.common.utils.Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .foreach((k, v) -> { });

        AtomicLong restored = new AtomicLong(), firstStart = new AtomicLong(), end = new AtomicLong();
        AtomicLong cpuEnd = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long from, long to) {
                firstStart.compareAndSet(0, System.nanoTime());
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {
                if (restored.addAndGet(n) >= entries && end.compareAndSet(0, System.nanoTime())) {
                    cpuEnd.set(cpuNanos());
                    done.countDown();
                }
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
            }
        });
        long cpuStart = cpuNanos();
        long start = System.nanoTime();
        streams.start();
        boolean ok = done.await(600, TimeUnit.SECONDS);
        streams.close(Duration.ofSeconds(60));
        if (!ok) {
            System.err.println("timed out: restored " + restored.get() + " of " + entries + " records");
            System.exit(1);
        }
        System.out.printf("RESULT peer=kafka-streams mode=restore entries=%d restored_s=%.3f "
                        + "restore_span_s=%.3f cpu_s=%.3f%n",
                entries, (end.get() - start) / 1e9, (end.get() - firstStart.get()) / 1e9,
                (cpuEnd.get() - cpuStart) / 1e9);
        System.exit(0);
    }
}
