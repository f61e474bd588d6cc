//! Client telemetry (KIP-714,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-714%3A+Client+metrics+and+observability>):
//! GetTelemetrySubscriptions (API 71) asks a broker which metrics it wants
//! and how often; PushTelemetry (API 72) sends them, OTLP-encoded
//! ([`crate::protocol::otlp`]) and compressed with the first codec the
//! broker accepts; closing the client sends one last push marked
//! `terminating`.
//!
//! [`Subscriber`] is the pure state machine (as Java's
//! `ClientTelemetryReporter`'s sender): it answers what to send and when,
//! from the responses and the clock it is given. [`ClientTelemetry`] is the
//! thin task around it. The metrics come from the client that starts it
//! (the producer or the consumer), through a [`Collect`] closure that reads
//! the client's counters and returns `None` once the client is gone.
//!
//! Errors are handled as Java does: `UNKNOWN_SUBSCRIPTION_ID` and
//! `UNSUPPORTED_COMPRESSION_TYPE` ask for the subscription again at once;
//! `TELEMETRY_TOO_LARGE` and `THROTTLING_QUOTA_EXCEEDED` ask again after
//! the push interval; `INVALID_REQUEST`, `INVALID_RECORD`,
//! `UNSUPPORTED_VERSION`, a broker without the APIs and any other code stop
//! telemetry for the client's life; a request that fails on the wire is
//! retried after 5 minutes (Java's default push interval).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use kafka_protocol::messages::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use tokio::sync::watch;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::Cluster;
use crate::error::Error;
use crate::net::{Connection, Workload};
use crate::protocol::compression::{self, Compression};
use crate::protocol::otlp::{self, DataPoint, Kind, Metric, Value};
use crate::protocol::versions::Versions;

const SUBSCRIPTIONS_VERSIONS: Versions = Versions::new(0, 0);
const PUSH_VERSIONS: Versions = Versions::new(0, 0);
/// Java's `ClientTelemetryReporter.DEFAULT_PUSH_INTERVAL_MS`: the interval
/// when the broker gives none, and the wait after a failed request.
pub const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(300);

const UNSUPPORTED_VERSION: i16 = 35;
const INVALID_REQUEST: i16 = 42;
const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
#[cfg(test)]
const INVALID_RECORD: i16 = 87;
const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
const UNKNOWN_SUBSCRIPTION_ID: i16 = 117;
const TELEMETRY_TOO_LARGE: i16 = 118;

/// One value read from a client's counters, named as the Java client names
/// it for telemetry (`org.apache.kafka.<group>.<metric>`, dashes as dots).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Full metric name, e.g. `org.apache.kafka.producer.record.send.total`.
    pub name: &'static str,
    /// Point attributes, e.g. `topic` and `partition`.
    pub attributes: Vec<(String, String)>,
    /// The reading.
    pub reading: Reading,
}

/// A counter total or a gauge value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reading {
    /// A monotonic total since the client started (pushed as a sum).
    Total(u64),
    /// A sampled value (pushed as a gauge).
    Gauge(f64),
}

/// The last total pushed per (metric, attributes) and when, Unix
/// nanoseconds: the base of delta sums.
pub type LastTotals = HashMap<(String, Vec<(String, String)>), (u64, u64)>;

/// Reads a client's metrics; `None` once the client is gone.
pub type Collect = Box<dyn Fn() -> Option<Vec<Sample>> + Send + Sync>;

/// Which metrics a subscription asks for (KIP-714 prefix matching).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// An empty list: nothing.
    Nothing,
    /// `*` (or an empty string): everything.
    All,
    /// Metrics whose name starts with one of these.
    Prefixes(Vec<String>),
}

impl Selector {
    /// From the `requested_metrics` of a GetTelemetrySubscriptions response.
    pub fn from_requested(requested: &[String]) -> Selector {
        if requested.is_empty() {
            Selector::Nothing
        } else if requested.iter().any(|r| r == "*" || r.is_empty()) {
            Selector::All
        } else {
            Selector::Prefixes(requested.to_vec())
        }
    }

    /// Whether `name` is subscribed.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::All => true,
            Selector::Prefixes(p) => p.iter().any(|p| name.starts_with(p.as_str())),
        }
    }
}

/// A GetTelemetrySubscriptions answer, as the state machine keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    /// The id the broker gave this client instance.
    pub instance_id: Uuid,
    /// The subscription set's id, sent back with each push.
    pub id: i32,
    /// How often to push.
    pub interval: Duration,
    /// Codecs the broker accepts, in its order of preference.
    pub accepted_compression: Vec<i8>,
    /// Sums as deltas since the last push rather than totals.
    pub delta: bool,
    /// Largest payload the broker accepts.
    pub max_bytes: usize,
    /// The metrics asked for.
    pub selector: Selector,
}

impl Subscription {
    /// The codec to compress with: the first accepted one we implement, or
    /// none (Java's `preferredCompressionType`).
    pub fn compression(&self) -> Compression {
        self.accepted_compression
            .iter()
            .find_map(|&c| Compression::from_attributes(i16::from(c)).ok())
            .unwrap_or(Compression::None)
    }
}

/// What the client must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Send GetTelemetrySubscriptions with this instance id (nil at first).
    Subscribe(Uuid),
    /// Push the subscribed metrics (`terminating` on close).
    Push {
        /// The last push, sent on close.
        terminating: bool,
    },
    /// Wait this long, then ask again.
    Wait(Duration),
    /// Telemetry is off for good (disabled by an error, or terminated).
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    SubscriptionNeeded,
    PushNeeded,
    TerminatingPushNeeded,
    Done,
}

/// The KIP-714 client state machine, with no I/O and no clock of its own.
#[derive(Debug)]
pub struct Subscriber {
    state: State,
    subscription: Option<Subscription>,
    /// When the next request is due.
    due: Instant,
}

impl Subscriber {
    /// A fresh client: asks for its subscription at once.
    pub fn new(now: Instant) -> Subscriber {
        Subscriber {
            state: State::SubscriptionNeeded,
            subscription: None,
            due: now,
        }
    }

    /// The current subscription, once one was received.
    pub fn subscription(&self) -> Option<&Subscription> {
        self.subscription.as_ref()
    }

    /// What to do at `now`.
    pub fn next(&self, now: Instant) -> Next {
        match self.state {
            State::Done => Next::Stop,
            State::TerminatingPushNeeded => Next::Push { terminating: true },
            _ if now < self.due => Next::Wait(self.due - now),
            State::SubscriptionNeeded => Next::Subscribe(
                self.subscription
                    .as_ref()
                    .map_or(Uuid::nil(), |s| s.instance_id),
            ),
            State::PushNeeded => Next::Push { terminating: false },
        }
    }

    /// A GetTelemetrySubscriptions answer without error. `jitter` in
    /// [0.5, 1.5) staggers the first push (Java's initial push jitter).
    pub fn subscribed(&mut self, mut s: Subscription, now: Instant, jitter: f64) {
        if self.state == State::Done || self.state == State::TerminatingPushNeeded {
            return;
        }
        if s.interval.is_zero() {
            s.interval = DEFAULT_PUSH_INTERVAL;
        }
        // A client keeps the id it was given first.
        if let Some(old) = &self.subscription {
            if s.instance_id.is_nil() {
                s.instance_id = old.instance_id;
            }
        }
        if s.selector == Selector::Nothing {
            self.state = State::SubscriptionNeeded;
            self.due = now + s.interval;
        } else {
            self.state = State::PushNeeded;
            self.due = now + s.interval.mul_f64(jitter.clamp(0.5, 1.5));
        }
        self.subscription = Some(s);
    }

    /// A push answered without error.
    pub fn pushed(&mut self, now: Instant) {
        match self.state {
            State::TerminatingPushNeeded => self.state = State::Done,
            State::PushNeeded => {
                let interval = self
                    .subscription
                    .as_ref()
                    .map_or(DEFAULT_PUSH_INTERVAL, |s| s.interval);
                self.due = now + interval;
            }
            _ => {}
        }
    }

    /// Either request answered with `code` (not 0).
    pub fn error(&mut self, code: i16, now: Instant) {
        if self.state == State::TerminatingPushNeeded {
            self.state = State::Done;
            return;
        }
        let interval = self
            .subscription
            .as_ref()
            .map_or(DEFAULT_PUSH_INTERVAL, |s| s.interval);
        match code {
            UNKNOWN_SUBSCRIPTION_ID | UNSUPPORTED_COMPRESSION_TYPE => {
                self.state = State::SubscriptionNeeded;
                self.due = now;
            }
            TELEMETRY_TOO_LARGE | THROTTLING_QUOTA_EXCEEDED => {
                self.state = State::SubscriptionNeeded;
                self.due = now + interval;
            }
            // INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and any
            // code Java does not map: retrying cannot help.
            _ => self.state = State::Done,
        }
    }

    /// A request that got no answer (connection lost, timeout).
    pub fn failed(&mut self, now: Instant) {
        if self.state == State::TerminatingPushNeeded {
            self.state = State::Done;
            return;
        }
        if self.state != State::Done {
            self.state = State::SubscriptionNeeded;
            self.due = now + DEFAULT_PUSH_INTERVAL;
        }
    }

    /// The client is closing: one terminating push if a subscription with
    /// metrics is in force, else nothing more.
    pub fn close(&mut self) {
        self.state = match self.state {
            State::PushNeeded => State::TerminatingPushNeeded,
            _ => State::Done,
        };
    }
}

/// Client-side codes that mean "retrying cannot help" for the state
/// machine: a broker without the APIs answers as UNSUPPORTED_VERSION would.
fn code_of(e: &Error) -> Option<i16> {
    match e {
        Error::UnsupportedVersion { .. } => Some(UNSUPPORTED_VERSION),
        _ => None,
    }
}

/// Turns samples into OTLP metrics under `selector`, as deltas since the
/// previous push (kept in `last`) or as totals since `start_nanos`.
pub fn to_metrics(
    samples: Vec<Sample>,
    selector: &Selector,
    delta: bool,
    start_nanos: u64,
    now_nanos: u64,
    last: &mut LastTotals,
) -> Vec<Metric> {
    let mut by_name: Vec<Metric> = Vec::new();
    for s in samples {
        if !selector.matches(s.name) {
            continue;
        }
        let (kind, point) = match s.reading {
            Reading::Gauge(v) => (
                Kind::Gauge,
                DataPoint {
                    attributes: s.attributes,
                    start_unix_nanos: 0,
                    time_unix_nanos: now_nanos,
                    value: Value::Double(v),
                },
            ),
            Reading::Total(total) => {
                let (value, since) = if delta {
                    let key = (s.name.to_owned(), s.attributes.clone());
                    let (prev, prev_at) = last
                        .insert(key, (total, now_nanos))
                        .unwrap_or((0, start_nanos));
                    (total.saturating_sub(prev), prev_at)
                } else {
                    (total, start_nanos)
                };
                (
                    Kind::Sum { delta },
                    DataPoint {
                        attributes: s.attributes,
                        start_unix_nanos: since,
                        time_unix_nanos: now_nanos,
                        value: Value::Int(i64::try_from(value).unwrap_or(i64::MAX)),
                    },
                )
            }
        };
        match by_name.iter_mut().find(|m| m.name == s.name) {
            Some(m) => m.points.push(point),
            None => by_name.push(Metric {
                name: s.name.to_owned(),
                kind,
                points: vec![point],
            }),
        }
    }
    by_name
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A running KIP-714 telemetry task for one client. Dropping it ends the
/// task at its next wait (after a request in flight, if any) without a
/// terminating push; so does the client's [`Collect`] returning `None`.
#[derive(Debug)]
pub struct ClientTelemetry {
    closing: watch::Sender<bool>,
    instance: watch::Receiver<Option<Uuid>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the task knows besides the state machine.
struct Pusher {
    cluster: Cluster,
    collect: Collect,
    resource: Vec<(String, String)>,
    conn: Option<Connection>,
    start_nanos: u64,
    last: LastTotals,
}

impl ClientTelemetry {
    /// Starts telemetry for a client: `resource` attributes describe it
    /// (e.g. `group_id`); `collect` reads its metrics. `None` outside a
    /// Tokio runtime (nothing to run the task on).
    pub fn spawn(
        cluster: Cluster,
        resource: Vec<(String, String)>,
        collect: Collect,
    ) -> Option<ClientTelemetry> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (closing, closing_rx) = watch::channel(false);
        let (instance_tx, instance) = watch::channel(None);
        let pusher = Pusher {
            cluster,
            collect,
            resource,
            conn: None,
            start_nanos: unix_nanos(),
            last: HashMap::new(),
        };
        let task = runtime.spawn(run(pusher, closing_rx, instance_tx));
        Some(ClientTelemetry {
            closing,
            instance,
            task: Mutex::new(Some(task)),
        })
    }

    /// The client instance id the broker assigned (Java's
    /// `clientInstanceId(timeout)`), waiting up to `timeout` for the first
    /// subscription; `None` if none came.
    pub async fn client_instance_id(&self, timeout: Duration) -> Option<Uuid> {
        let mut rx = self.instance.clone();
        let got = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(id)) => *id,
            _ => *self.instance.borrow(),
        }
    }

    /// Sends the terminating push (when a subscription is in force) and
    /// stops, waiting at most `timeout`.
    pub async fn close(&self, timeout: Duration) {
        self.closing.send_replace(true);
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut task) = task {
            if tokio::time::timeout(timeout, &mut task).await.is_err() {
                debug!("terminating telemetry push did not finish in time");
                task.abort();
            }
        }
    }
}

async fn run(
    mut p: Pusher,
    mut closing: watch::Receiver<bool>,
    instance: watch::Sender<Option<Uuid>>,
) {
    let mut sm = Subscriber::new(Instant::now());
    loop {
        if *closing.borrow() {
            sm.close();
        }
        match sm.next(Instant::now()) {
            Next::Stop => return,
            Next::Wait(d) => {
                // The handle dropped (its client is gone, not closed): no
                // terminating push, and nothing keeps the cluster open.
                let dropped = tokio::select! {
                    _ = tokio::time::sleep(d) => false,
                    changed = closing.changed() => changed.is_err(),
                };
                if dropped || (!*closing.borrow() && (p.collect)().is_none()) {
                    return;
                }
            }
            Next::Subscribe(id) => match p.subscribe(id).await {
                Ok(s) => {
                    info!(
                        client_instance_id = %s.instance_id,
                        subscription_id = s.id,
                        interval_ms = s.interval.as_millis() as u64,
                        "client telemetry subscription (KIP-714)"
                    );
                    instance.send_replace(Some(s.instance_id));
                    sm.subscribed(s, Instant::now(), 0.5 + fastrand::f64());
                }
                Err(Failure::Code(code)) => sm.error(code, Instant::now()),
                Err(Failure::Wire) => sm.failed(Instant::now()),
            },
            Next::Push { terminating } => {
                let Some(s) = sm.subscription().cloned() else {
                    sm.failed(Instant::now());
                    continue;
                };
                match p.push(&s, terminating).await {
                    Ok(()) => sm.pushed(Instant::now()),
                    Err(Failure::Code(code)) => sm.error(code, Instant::now()),
                    Err(Failure::Wire) => sm.failed(Instant::now()),
                }
            }
        }
    }
}

enum Failure {
    /// The broker answered with an error code (or cannot serve the API).
    Code(i16),
    /// No answer.
    Wire,
}

impl Pusher {
    /// The connection telemetry sticks to (as Java's, one broker), or a
    /// new one once it closed.
    async fn broker(&mut self) -> Result<Connection, Failure> {
        if let Some(c) = self.conn.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        match self.cluster.any_connection(Workload::Admin).await {
            Ok(c) => {
                self.conn = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                debug!(error = %e, "no broker for client telemetry");
                self.conn = None;
                Err(Failure::Wire)
            }
        }
    }

    fn wire_error(&mut self, api: &str, e: &Error) -> Failure {
        if let Some(code) = code_of(e) {
            debug!(api, error = %e, "client telemetry not served by this broker; telemetry stops");
            return Failure::Code(code);
        }
        debug!(api, error = %e, "client telemetry request failed");
        self.conn = None;
        Failure::Wire
    }

    async fn subscribe(&mut self, id: Uuid) -> Result<Subscription, Failure> {
        let conn = self.broker().await?;
        let req = GetTelemetrySubscriptionsRequest::default().with_client_instance_id(id);
        let resp = match conn.send(&req, SUBSCRIPTIONS_VERSIONS).await {
            Ok(r) => r,
            Err(e) => return Err(self.wire_error("GetTelemetrySubscriptions", &e)),
        };
        if resp.error_code != 0 {
            if let Err(e) = Error::check(resp.error_code, || {
                format!("{}: GetTelemetrySubscriptions", conn.broker())
            }) {
                warn!(error = %e, "client telemetry subscription refused");
            }
            return Err(Failure::Code(resp.error_code));
        }
        let requested: Vec<String> = resp
            .requested_metrics
            .iter()
            .map(|m| m.as_str().to_owned())
            .collect();
        Ok(Subscription {
            instance_id: if resp.client_instance_id.is_nil() {
                id
            } else {
                resp.client_instance_id
            },
            id: resp.subscription_id,
            interval: Duration::from_millis(u64::try_from(resp.push_interval_ms).unwrap_or(0)),
            accepted_compression: resp.accepted_compression_types.clone(),
            delta: resp.delta_temporality,
            max_bytes: usize::try_from(resp.telemetry_max_bytes).unwrap_or(0),
            selector: Selector::from_requested(&requested),
        })
    }

    async fn push(&mut self, s: &Subscription, terminating: bool) -> Result<(), Failure> {
        // The client is gone (dropped without close): push nothing more.
        let Some(samples) = (self.collect)() else {
            return Err(Failure::Code(INVALID_REQUEST));
        };
        let now = unix_nanos();
        let metrics = to_metrics(
            samples,
            &s.selector,
            s.delta,
            self.start_nanos,
            now,
            &mut self.last,
        );
        let raw = otlp::encode_metrics_data(
            &self.resource,
            ("purekafka", env!("CARGO_PKG_VERSION")),
            &metrics,
        );
        let mut codec = s.compression();
        let mut payload = BytesMut::new();
        if compression::compress(codec, None, &raw, &mut payload).is_err() {
            codec = Compression::None;
            payload.clear();
            payload.extend_from_slice(&raw);
        }
        if s.max_bytes > 0 && payload.len() > s.max_bytes {
            warn!(
                bytes = payload.len(),
                max = s.max_bytes,
                "client telemetry payload over the broker's telemetry_max_bytes; not pushed"
            );
            return Err(Failure::Code(TELEMETRY_TOO_LARGE));
        }
        let conn = self.broker().await?;
        let req = PushTelemetryRequest::default()
            .with_client_instance_id(s.instance_id)
            .with_subscription_id(s.id)
            .with_terminating(terminating)
            .with_compression_type(codec.code() as i8)
            .with_metrics(payload.freeze());
        let resp = match conn.send(&req, PUSH_VERSIONS).await {
            Ok(r) => r,
            Err(e) => return Err(self.wire_error("PushTelemetry", &e)),
        };
        if resp.error_code != 0 {
            if let Err(e) = Error::check(resp.error_code, || {
                format!("{}: PushTelemetry", conn.broker())
            }) {
                warn!(error = %e, terminating, "client telemetry push refused");
            }
            return Err(Failure::Code(resp.error_code));
        }
        debug!(
            broker = %conn.broker(),
            metrics = metrics.len(),
            terminating,
            "client telemetry pushed"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(selector: Selector) -> Subscription {
        Subscription {
            instance_id: Uuid::from_u128(7),
            id: 3,
            interval: Duration::from_secs(10),
            accepted_compression: vec![4, 3, 1, 2],
            delta: false,
            max_bytes: 1 << 20,
            selector,
        }
    }

    #[test]
    fn first_request_asks_for_a_subscription_with_a_nil_id() {
        let t = Instant::now();
        assert_eq!(Subscriber::new(t).next(t), Next::Subscribe(Uuid::nil()));
    }

    #[test]
    fn subscribed_metrics_are_pushed_after_the_jittered_interval() {
        let t = Instant::now();
        let mut s = Subscriber::new(t);
        s.subscribed(sub(Selector::All), t, 0.5);
        assert_eq!(s.next(t), Next::Wait(Duration::from_secs(5)));
        let t1 = t + Duration::from_secs(5);
        assert_eq!(s.next(t1), Next::Push { terminating: false });
        s.pushed(t1);
        assert_eq!(s.next(t1), Next::Wait(Duration::from_secs(10)));
    }

    #[test]
    fn no_metrics_means_asking_again_after_the_interval_and_no_terminating_push() {
        let t = Instant::now();
        let mut s = Subscriber::new(t);
        s.subscribed(sub(Selector::Nothing), t, 1.0);
        assert_eq!(s.next(t), Next::Wait(Duration::from_secs(10)));
        assert_eq!(
            s.next(t + Duration::from_secs(10)),
            Next::Subscribe(Uuid::from_u128(7))
        );
        s.close();
        assert_eq!(s.next(t), Next::Stop);
    }

    #[test]
    fn close_sends_one_terminating_push_then_stops() {
        let t = Instant::now();
        let mut s = Subscriber::new(t);
        s.subscribed(sub(Selector::All), t, 1.0);
        s.close();
        assert_eq!(s.next(t), Next::Push { terminating: true });
        s.pushed(t);
        assert_eq!(s.next(t), Next::Stop);
        // Also when the terminating push fails.
        let mut s = Subscriber::new(t);
        s.subscribed(sub(Selector::All), t, 1.0);
        s.close();
        s.error(UNKNOWN_SUBSCRIPTION_ID, t);
        assert_eq!(s.next(t), Next::Stop);
    }

    #[test]
    fn errors_are_handled_as_java_does() {
        let t = Instant::now();
        let later = t + Duration::from_secs(10);
        for (code, next_now, next_later) in [
            (
                UNKNOWN_SUBSCRIPTION_ID,
                Next::Subscribe(Uuid::from_u128(7)),
                None,
            ),
            (
                UNSUPPORTED_COMPRESSION_TYPE,
                Next::Subscribe(Uuid::from_u128(7)),
                None,
            ),
            (
                TELEMETRY_TOO_LARGE,
                Next::Wait(Duration::from_secs(10)),
                Some(Next::Subscribe(Uuid::from_u128(7))),
            ),
            (
                THROTTLING_QUOTA_EXCEEDED,
                Next::Wait(Duration::from_secs(10)),
                Some(Next::Subscribe(Uuid::from_u128(7))),
            ),
            (INVALID_REQUEST, Next::Stop, Some(Next::Stop)),
            (INVALID_RECORD, Next::Stop, Some(Next::Stop)),
            (UNSUPPORTED_VERSION, Next::Stop, Some(Next::Stop)),
            (3, Next::Stop, Some(Next::Stop)),
        ] {
            let mut s = Subscriber::new(t);
            s.subscribed(sub(Selector::All), t, 1.0);
            s.error(code, t);
            assert_eq!(s.next(t), next_now, "code {code}");
            if let Some(n) = next_later {
                assert_eq!(s.next(later), n, "code {code} later");
            }
        }
    }

    #[test]
    fn a_lost_request_waits_the_default_interval() {
        let t = Instant::now();
        let mut s = Subscriber::new(t);
        s.failed(t);
        assert_eq!(s.next(t), Next::Wait(DEFAULT_PUSH_INTERVAL));
        assert_eq!(
            s.next(t + DEFAULT_PUSH_INTERVAL),
            Next::Subscribe(Uuid::nil())
        );
    }

    #[test]
    fn prefixes_select_metrics() {
        let sel = Selector::from_requested(&["org.apache.kafka.producer.".into()]);
        assert!(sel.matches("org.apache.kafka.producer.record.send.total"));
        assert!(!sel.matches("org.apache.kafka.consumer.coordinator.assigned.partitions"));
        assert_eq!(Selector::from_requested(&["*".into()]), Selector::All);
        assert_eq!(Selector::from_requested(&[]), Selector::Nothing);
        assert!(!Selector::Nothing.matches("x"));
    }

    #[test]
    fn compression_is_the_first_accepted_codec() {
        assert_eq!(sub(Selector::All).compression(), Compression::Zstd);
        let mut s = sub(Selector::All);
        s.accepted_compression = vec![];
        assert_eq!(s.compression(), Compression::None);
        s.accepted_compression = vec![9, 1];
        assert_eq!(s.compression(), Compression::Gzip);
    }

    #[test]
    fn totals_become_deltas_between_pushes_when_asked() {
        let sample = |v| Sample {
            name: "org.apache.kafka.producer.record.send.total",
            attributes: vec![],
            reading: Reading::Total(v),
        };
        let mut last = HashMap::new();
        let m = to_metrics(vec![sample(10)], &Selector::All, true, 1, 2, &mut last);
        assert_eq!(m[0].points[0].value, Value::Int(10));
        assert_eq!(m[0].points[0].start_unix_nanos, 1);
        let m = to_metrics(vec![sample(25)], &Selector::All, true, 1, 3, &mut last);
        assert_eq!(m[0].points[0].value, Value::Int(15));
        assert_eq!(m[0].points[0].start_unix_nanos, 2);
        let m = to_metrics(vec![sample(25)], &Selector::All, false, 1, 4, &mut last);
        assert_eq!(m[0].points[0].value, Value::Int(25));
        assert_eq!(m[0].kind, Kind::Sum { delta: false });
        let none = to_metrics(
            vec![sample(25)],
            &Selector::from_requested(&["org.apache.kafka.consumer.".into()]),
            false,
            1,
            4,
            &mut last,
        );
        assert!(none.is_empty());
    }
}
