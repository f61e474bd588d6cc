// A broker metric reporter for the KIP-714 tests (scripts/kafka up --telemetry):
// it receives every PushTelemetry payload as a ClientTelemetryExporter,
// decodes it with the OTLP classes Kafka ships (shaded in kafka-clients), and
// appends one tab-separated line per data point to the file named by the
// broker property purekafka.telemetry.log:
//
//   point <instance> <terminating> <client_id> <metric> <kind> <value> <point attrs> <resource attrs>
//
// kind is gauge, sum-cumulative or sum-delta; attributes are k=v joined by
// commas; instance is the client instance id as a standard UUID string. A
// payload that does not decode is recorded as "undecodable <instance> <error>".
// Every payload also gets a line "push <instance> <terminating> <client_id>
// <content type> <points>". Lines are written whole under a lock.

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.stream.Collectors;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryContext;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.KeyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.AggregationTemporality;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.Metric;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ScopeMetrics;

public class TelemetryRecorder implements MetricsReporter, ClientTelemetryExporterProvider {
    private Path log;

    @Override
    public void configure(Map<String, ?> configs) {
        Object path = configs.get("purekafka.telemetry.log");
        if (path == null) {
            throw new IllegalArgumentException("TelemetryRecorder needs purekafka.telemetry.log");
        }
        log = Paths.get(path.toString());
    }

    @Override
    public void init(List<KafkaMetric> metrics) {}

    @Override
    public void metricChange(KafkaMetric metric) {}

    @Override
    public void metricRemoval(KafkaMetric metric) {}

    @Override
    public void close() {}

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return this::record;
    }

    private static String attrs(List<KeyValue> kvs) {
        return kvs.stream()
            .map(kv -> kv.getKey() + "=" + kv.getValue().getStringValue())
            .collect(Collectors.joining(","));
    }

    private static String value(NumberDataPoint p) {
        return p.getValueCase() == NumberDataPoint.ValueCase.AS_INT
            ? Long.toString(p.getAsInt())
            : Double.toString(p.getAsDouble());
    }

    private synchronized void record(ClientTelemetryContext context, ClientTelemetryPayload payload) {
        Uuid id = payload.clientInstanceId();
        String instance = new UUID(id.getMostSignificantBits(), id.getLeastSignificantBits()).toString();
        String clientId = context.authorizableRequestContext().clientId();
        StringBuilder out = new StringBuilder();
        int points = 0;
        try {
            ByteBuffer data = payload.data().duplicate();
            MetricsData decoded = MetricsData.parseFrom(data);
            for (ResourceMetrics rm : decoded.getResourceMetricsList()) {
                String resource = attrs(rm.getResource().getAttributesList());
                for (ScopeMetrics sm : rm.getScopeMetricsList()) {
                    for (Metric m : sm.getMetricsList()) {
                        List<NumberDataPoint> ps;
                        String kind;
                        if (m.hasGauge()) {
                            ps = m.getGauge().getDataPointsList();
                            kind = "gauge";
                        } else if (m.hasSum()) {
                            ps = m.getSum().getDataPointsList();
                            kind = m.getSum().getAggregationTemporality()
                                == AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
                                ? "sum-delta" : "sum-cumulative";
                        } else {
                            continue;
                        }
                        for (NumberDataPoint p : ps) {
                            points++;
                            out.append(String.join("\t", "point", instance,
                                Boolean.toString(payload.isTerminating()), clientId, m.getName(), kind,
                                value(p), attrs(p.getAttributesList()), resource)).append('\n');
                        }
                    }
                }
            }
        } catch (Exception e) {
            out.append("undecodable\t").append(instance).append('\t')
                .append(String.valueOf(e).replace('\n', ' ')).append('\n');
        }
        out.append(String.join("\t", "push", instance, Boolean.toString(payload.isTerminating()),
            clientId, payload.contentType(), Integer.toString(points))).append('\n');
        try {
            Files.write(log, out.toString().getBytes(StandardCharsets.UTF_8),
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new RuntimeException("TelemetryRecorder cannot write " + log, e);
        }
    }
}
