// The Kafka Streams peer of examples/streams_bench.rs `passthrough` (issue
// #22): one stream thread copies an input topic to an output topic, bytes in,
// bytes out, at-least-once or exactly_once_v2. Prints one RESULT line:
// throughput from the first record seen to the last, and the JVM's process
// CPU over that span and over its whole life (start and JIT included).
//
//   java -cp 'libs/*:classes' PassThrough BOOTSTRAP INPUT OUTPUT RECORDS alos|eos
//
// A record counts when the stage forwards it; the run ends with close(),
// which flushes the producer and commits, and the total CPU covers it.

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

public final class PassThrough {
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 5) {
            System.err.println("usage: PassThrough BOOTSTRAP INPUT OUTPUT RECORDS alos|eos");
            System.exit(2);
        }
        String bootstrap = args[0], input = args[1], output = args[2];
        long records = Long.parseLong(args[3]);
        boolean eos = args[4].equals("eos");

        Properties p = new Properties();
        // A new group each run: a rerun on the same input reads it all again.
        p.put(StreamsConfig.APPLICATION_ID_CONFIG,
                "ks-bench-" + input + "-" + Long.toHexString(System.nanoTime()));
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                eos ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.STATE_DIR_CONFIG,
                Files.createTempDirectory("ks-bench").toString());
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        AtomicLong seen = new AtomicLong();
        AtomicLong first = new AtomicLong(), last = new AtomicLong();
        AtomicLong cpuFirst = new AtomicLong(), cpuLast = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);

        StreamsBuilder b = new StreamsBuilder();
        b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
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
                })
                .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

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
                eos ? "eos" : "alos", records, (records - 1) / span, span, cpuSpan,
                cpuNanos() / 1e9);
        System.exit(0);
    }
}
