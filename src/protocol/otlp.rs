//! OTLP metrics encoding: the payload of KIP-714's PushTelemetry request
//! (<https://cwiki.apache.org/confluence/display/KAFKA/KIP-714%3A+Client+metrics+and+observability>),
//! an OpenTelemetry `MetricsData` message
//! (`opentelemetry/proto/metrics/v1/metrics.proto`) in protobuf binary form.
//!
//! Only what a client pushes is written: one resource with string
//! attributes, one instrumentation scope, and gauges and sums of number
//! data points. Encoding only: the broker decodes. A protobuf encoder of our
//! own (a few varints and length-delimited fields) instead of a generated
//! crate keeps the default build small.

/// A number data point's value (`NumberDataPoint.value`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// `as_int` (sfixed64).
    Int(i64),
    /// `as_double`.
    Double(f64),
}

/// What a metric is (`Metric.data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value sampled at push time (`Gauge`).
    Gauge,
    /// A monotonic counter (`Sum`, `is_monotonic`), as deltas since the
    /// previous push or as totals since the start time.
    Sum {
        /// `AGGREGATION_TEMPORALITY_DELTA` rather than `_CUMULATIVE`.
        delta: bool,
    },
}

/// One data point of a metric.
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    /// Point attributes (e.g. `topic`, `partition`).
    pub attributes: Vec<(String, String)>,
    /// Start of the interval (sums), Unix nanoseconds; 0 for gauges.
    pub start_unix_nanos: u64,
    /// When the value was read, Unix nanoseconds.
    pub time_unix_nanos: u64,
    /// The value.
    pub value: Value,
}

/// One metric with its points.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Full name, e.g. `org.apache.kafka.producer.record.send.total`.
    pub name: String,
    /// Gauge or sum.
    pub kind: Kind,
    /// The points (one per attribute set).
    pub points: Vec<DataPoint>,
}

const LEN: u8 = 2;
const VARINT: u8 = 0;
const FIXED64: u8 = 1;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string_value = 1 }`.
fn key_value(key: &str, value: &str) -> Vec<u8> {
    let mut any = Vec::new();
    bytes_field(&mut any, 1, value.as_bytes());
    let mut kv = Vec::new();
    bytes_field(&mut kv, 1, key.as_bytes());
    bytes_field(&mut kv, 2, &any);
    kv
}

/// `NumberDataPoint`: start 2, time 3, as_double 4, as_int 6, attributes 7.
fn data_point(p: &DataPoint) -> Vec<u8> {
    let mut out = Vec::new();
    if p.start_unix_nanos != 0 {
        fixed64(&mut out, 2, p.start_unix_nanos);
    }
    fixed64(&mut out, 3, p.time_unix_nanos);
    match p.value {
        Value::Double(d) => fixed64(&mut out, 4, d.to_bits()),
        Value::Int(i) => fixed64(&mut out, 6, i as u64),
    }
    for (k, v) in &p.attributes {
        bytes_field(&mut out, 7, &key_value(k, v));
    }
    out
}

/// `Metric`: name 1, gauge 5 (`Gauge { data_points = 1 }`), sum 7
/// (`Sum { data_points = 1; aggregation_temporality = 2; is_monotonic = 3 }`).
fn metric(m: &Metric) -> Vec<u8> {
    let mut data = Vec::new();
    for p in &m.points {
        bytes_field(&mut data, 1, &data_point(p));
    }
    let mut out = Vec::new();
    bytes_field(&mut out, 1, m.name.as_bytes());
    match m.kind {
        Kind::Gauge => bytes_field(&mut out, 5, &data),
        Kind::Sum { delta } => {
            // AggregationTemporality: DELTA = 1, CUMULATIVE = 2.
            tag(&mut data, 2, VARINT);
            varint(&mut data, if delta { 1 } else { 2 });
            tag(&mut data, 3, VARINT);
            varint(&mut data, 1);
            bytes_field(&mut out, 7, &data);
        }
    }
    out
}

/// Encodes `MetricsData { ResourceMetrics { Resource { attributes },
/// ScopeMetrics { InstrumentationScope { name, version }, metrics } } }`.
pub fn encode_metrics_data(
    resource: &[(String, String)],
    scope: (&str, &str),
    metrics: &[Metric],
) -> Vec<u8> {
    let mut res = Vec::new();
    for (k, v) in resource {
        bytes_field(&mut res, 1, &key_value(k, v));
    }
    let mut scope_msg = Vec::new();
    bytes_field(&mut scope_msg, 1, scope.0.as_bytes());
    bytes_field(&mut scope_msg, 2, scope.1.as_bytes());
    let mut scope_metrics = Vec::new();
    bytes_field(&mut scope_metrics, 1, &scope_msg);
    for m in metrics {
        bytes_field(&mut scope_metrics, 2, &metric(m));
    }
    let mut rm = Vec::new();
    bytes_field(&mut rm, 1, &res);
    bytes_field(&mut rm, 2, &scope_metrics);
    let mut out = Vec::new();
    bytes_field(&mut out, 1, &rm);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal protobuf reader for the tests: (field, wire type, payload).
    fn fields(mut b: &[u8]) -> Vec<(u32, u8, Vec<u8>)> {
        fn read_varint(b: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = read_varint(&mut b);
            let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
            let payload = match wire {
                0 => read_varint(&mut b).to_le_bytes().to_vec(),
                1 => {
                    let p = b[..8].to_vec();
                    b = &b[8..];
                    p
                }
                2 => {
                    let n = read_varint(&mut b) as usize;
                    let p = b[..n].to_vec();
                    b = &b[n..];
                    p
                }
                w => panic!("unexpected wire type {w}"),
            };
            out.push((field, wire, payload));
        }
        out
    }

    fn only(b: &[u8], field: u32) -> Vec<u8> {
        let f: Vec<_> = fields(b).into_iter().filter(|f| f.0 == field).collect();
        assert_eq!(f.len(), 1, "field {field} once");
        f[0].2.clone()
    }

    #[test]
    fn key_value_bytes_are_the_protobuf_encoding() {
        // KeyValue{key:"a", value:AnyValue{string_value:"b"}}:
        // 0a 01 'a' 12 03 (0a 01 'b').
        assert_eq!(
            key_value("a", "b"),
            vec![0x0a, 0x01, b'a', 0x12, 0x03, 0x0a, 0x01, b'b']
        );
    }

    #[test]
    fn varints_use_seven_bits_per_byte() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, vec![0xac, 0x02]);
    }

    #[test]
    fn metrics_data_nests_resource_scope_metric_and_points() {
        let metrics = vec![
            Metric {
                name: "org.apache.kafka.producer.record.send.total".into(),
                kind: Kind::Sum { delta: false },
                points: vec![DataPoint {
                    attributes: vec![],
                    start_unix_nanos: 5,
                    time_unix_nanos: 9,
                    value: Value::Double(40.0),
                }],
            },
            Metric {
                name: "org.apache.kafka.consumer.fetch.manager.records.lag".into(),
                kind: Kind::Gauge,
                points: vec![DataPoint {
                    attributes: vec![
                        ("topic".into(), "t".into()),
                        ("partition".into(), "1".into()),
                    ],
                    start_unix_nanos: 0,
                    time_unix_nanos: 9,
                    value: Value::Int(-3),
                }],
            },
        ];
        let data = encode_metrics_data(
            &[("client_rack".into(), "r1".into())],
            ("purekafka", "0.1"),
            &metrics,
        );
        let rm = only(&data, 1);
        let resource = only(&rm, 1);
        assert_eq!(only(&resource, 1), key_value("client_rack", "r1"));
        let sm = only(&rm, 2);
        let scope = only(&sm, 1);
        assert_eq!(only(&scope, 1), b"purekafka");
        let ms: Vec<_> = fields(&sm).into_iter().filter(|f| f.0 == 2).collect();
        assert_eq!(ms.len(), 2);

        let sum_metric = &ms[0].2;
        assert_eq!(
            only(sum_metric, 1),
            b"org.apache.kafka.producer.record.send.total"
        );
        let sum = only(sum_metric, 7);
        assert_eq!(only(&sum, 2)[0], 2, "cumulative");
        assert_eq!(only(&sum, 3)[0], 1, "monotonic");
        let point = only(&sum, 1);
        assert_eq!(only(&point, 2), 5u64.to_le_bytes());
        assert_eq!(only(&point, 3), 9u64.to_le_bytes());
        assert_eq!(only(&point, 4), 40.0f64.to_bits().to_le_bytes());

        let gauge_metric = &ms[1].2;
        let gauge = only(gauge_metric, 5);
        let point = only(&gauge, 1);
        assert_eq!(only(&point, 6), (-3i64 as u64).to_le_bytes());
        let attrs: Vec<_> = fields(&point).into_iter().filter(|f| f.0 == 7).collect();
        assert_eq!(attrs[0].2, key_value("topic", "t"));
        assert_eq!(attrs[1].2, key_value("partition", "1"));
        assert!(
            fields(&point).iter().all(|f| f.0 != 2),
            "no start time on gauges"
        );
    }

    #[test]
    fn delta_sums_say_delta() {
        let m = Metric {
            name: "x".into(),
            kind: Kind::Sum { delta: true },
            points: vec![],
        };
        let sum = only(&metric(&m), 7);
        assert_eq!(only(&sum, 2)[0], 1);
    }
}
