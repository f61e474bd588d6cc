//! The consumer and producer configs of a streams application, from its
//! [`StreamsConfig`]: typed parts (a [`ClientConfig`], a [`ConsumerConfig`],
//! a [`ProducerConfig`]) when given, Kafka properties otherwise, and on top
//! the settings the runtime owns (the group id, manual commits, and under
//! exactly-once `read_committed` and a transactional id).

use std::time::Duration;

use crate::consumer::{ConsumerConfig, IsolationLevel};
use crate::error::{Error, Result};
use crate::producer::ProducerConfig;
use crate::streams::config::{is_client_key, StreamsConfig};

/// The main lane's consumer: group `application.id`.
pub(super) fn consumer_config(c: &StreamsConfig) -> Result<ConsumerConfig> {
    let defaults = [
        ("auto.offset.reset", "earliest"),
        ("fetch.max.wait.ms", "100"),
        // Cooperative rebalancing (KIP-429): a rebalance revokes only the
        // partitions that move, so the others keep processing.
        ("partition.assignment.strategy", "cooperative-sticky"),
    ];
    member_config(c, &c.application_id, &defaults)
}

/// The retry lane's consumer: group `<application.id>-retry-lane`.
pub(super) fn lane_consumer_config(c: &StreamsConfig) -> Result<ConsumerConfig> {
    let group = format!("{}-retry-lane", c.application_id);
    let defaults = [
        ("auto.offset.reset", "earliest"),
        ("fetch.max.wait.ms", "50"),
    ];
    member_config(c, &group, &defaults)
}

fn member_config(
    c: &StreamsConfig,
    group: &str,
    defaults: &[(&str, &str)],
) -> Result<ConsumerConfig> {
    let mut cfg = match &c.consumer {
        Some(typed) => typed.clone(),
        None => {
            let mut props: Vec<(String, String)> =
                vec![("bootstrap.servers".into(), c.bootstrap_servers.clone())];
            props.extend(defaults.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            props.extend(c.consumer_properties.iter().cloned());
            ConsumerConfig::from_properties(props)?
        }
    };
    if let Some(client) = &c.client {
        cfg.client = client.clone();
    }
    default_client_id(&mut cfg.client, c);
    // The runtime's own settings: it commits watermarks itself.
    cfg.group_id = Some(group.to_owned());
    cfg.group.group_id = group.to_owned();
    cfg.enable_auto_commit = false;
    if c.is_exactly_once() {
        cfg.isolation_level = IsolationLevel::ReadCommitted;
    }
    Ok(cfg)
}

/// Whether the producer keeps each partition's records in the order they
/// were sent, retries included, so that a record's outputs can be sent
/// while an earlier record's are unacknowledged: with idempotence (the
/// broker rejects out-of-order sequences and the producer resends in
/// order), or with one request in flight per connection. Without either,
/// a retried batch can land behind a later one (as with Java's producer),
/// so the runtime waits for each record's acknowledgements instead.
pub(super) fn keeps_order(c: &ProducerConfig) -> bool {
    c.enable_idempotence || c.max_in_flight == 1
}

/// The producer: idempotent, and under exactly-once transactional (see
/// [`transactional_id`]).
pub(super) fn producer_config(c: &StreamsConfig) -> Result<ProducerConfig> {
    let transactional_id = c.is_exactly_once().then(|| transactional_id(c));
    let mut cfg = match &c.producer {
        Some(typed) => {
            let mut cfg = typed.clone();
            if transactional_id.is_some() && !cfg.enable_idempotence {
                return Err(Error::config(
                    "enable.idempotence",
                    "exactly-once needs an idempotent producer; leave enable.idempotence on",
                ));
            }
            if transactional_id.is_some() {
                cfg.transactional_id = transactional_id;
            }
            cfg
        }
        None => {
            let mut b = ProducerConfig::builder()
                .bootstrap_servers(&c.bootstrap_servers)
                .linger(Duration::from_millis(2));
            if let Some(id) = transactional_id {
                // As Kafka Streams: a killed instance's open transaction
                // holds read_committed readers back until the broker aborts
                // it, unless a successor with its transactional id fences it
                // first (a static member's), so keep the timeout short.
                // Overridable by a property.
                b = b
                    .transactional_id(id)
                    .set("transaction.timeout.ms", "10000")?;
            }
            for (k, v) in &c.producer_properties {
                b = b.set(k, v)?;
            }
            b.build()?
        }
    };
    if let Some(client) = &c.client {
        cfg.client = client.clone();
    }
    default_client_id(&mut cfg.client, c);
    Ok(cfg)
}

/// The exactly-once producer's `transactional.id`, one per instance:
/// `<application.id>-<group.instance.id>` for a static member (KIP-345),
/// `<application.id>-<16 random hex digits>` otherwise.
///
/// A static member restarted under its `group.instance.id` (a rescheduled
/// pod keeps its name) thus has its predecessor's transactional id, so its
/// `InitProducerId` fences the predecessor and has the coordinator abort
/// its open transaction at once (KIP-98), as Kafka Streams' restarted
/// instance does with the process id it keeps in its state directory. A
/// fresh id cannot fence anything, and a killed instance's transaction then
/// holds `read_committed` readers back until `transaction.timeout.ms` runs
/// out on the broker. The group already refuses two live members with one
/// instance id, so two live producers never share a transactional id.
fn transactional_id(c: &StreamsConfig) -> String {
    let instance = match &c.consumer {
        Some(typed) => typed.group.group_instance_id.clone(),
        None => c
            .consumer_properties
            .iter()
            .rev()
            .find(|(k, _)| k == "group.instance.id")
            .map(|(_, v)| v.clone()),
    };
    match instance {
        Some(instance) => format!("{}-{instance}", c.application_id),
        None => format!("{}-{:016x}", c.application_id, fastrand::u64(..)),
    }
}

/// Without a `client.id`, the runtime's clients send the `application.id`,
/// the prefix Kafka Streams gives its clients' ids, so broker quotas, ACL
/// logs and request logs name the application (a plain client would
/// generate `consumer-<group>-N` / `producer-N`, and the cluster they share
/// would send an empty id).
fn default_client_id(client: &mut crate::config::ClientConfig, c: &StreamsConfig) {
    if client.client_id.is_empty() {
        client.client_id = c.application_id.clone();
    }
}

/// Whether the producer can share the consumer's cluster: its connection
/// settings are the same, which holds unless producer properties set keys
/// of the client config (a typed producer config brings its own client
/// part, so it shares only under a typed client config).
pub(super) fn producer_shares_cluster(c: &StreamsConfig) -> bool {
    if c.client.is_some() {
        return true;
    }
    if c.producer.is_some() || c.consumer.is_some() {
        return false;
    }
    !c.consumer_properties
        .iter()
        .chain(&c.producer_properties)
        .any(|(k, v)| is_client_key(k, v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClientConfig;
    use crate::streams::CommitMode;

    fn base() -> crate::streams::StreamsConfigBuilder {
        StreamsConfig::builder("app", "127.0.0.1:9092")
    }

    #[test]
    fn properties_keep_the_runtime_settings_on_top() {
        let c = base()
            .consumer_property("enable.auto.commit", "true")
            .consumer_property("session.timeout.ms", "12000")
            .build()
            .unwrap();
        let cc = consumer_config(&c).unwrap();
        assert_eq!(cc.group_id.as_deref(), Some("app"));
        assert!(
            !cc.enable_auto_commit,
            "the runtime commits watermarks itself"
        );
        assert_eq!(cc.group.session_timeout, Duration::from_secs(12));
        assert!(producer_shares_cluster(&c));
        let lane = lane_consumer_config(&c).unwrap();
        assert_eq!(lane.group_id.as_deref(), Some("app-retry-lane"));
    }

    #[test]
    fn a_typed_part_and_its_properties_are_refused_together() {
        let consumer = ConsumerConfig::builder()
            .bootstrap_servers("10.0.0.1:9092")
            .build()
            .unwrap();
        let err = base()
            .consumer(consumer)
            .consumer_property("max.poll.records", "5")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("max.poll.records"), "{err}");
        let client = ClientConfig::builder()
            .bootstrap_servers("10.0.0.1:9092")
            .build()
            .unwrap();
        let err = base()
            .client(client)
            .producer_property("security.protocol", "SASL_PLAINTEXT")
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("security.protocol"), "{err}");
    }

    #[test]
    fn a_typed_client_reaches_consumer_and_producer() {
        let client = ClientConfig::builder()
            .bootstrap_servers("10.0.0.1:9093")
            .client_id("typed")
            .build()
            .unwrap();
        let c = base()
            .client(client)
            .commit_mode(CommitMode::ExactlyOnce)
            .build()
            .unwrap();
        let cc = consumer_config(&c).unwrap();
        let pc = producer_config(&c).unwrap();
        assert_eq!(cc.client.client_id, "typed");
        assert_eq!(pc.client.client_id, "typed");
        assert_eq!(cc.isolation_level, IsolationLevel::ReadCommitted);
        assert!(pc.transactional_id.as_deref().unwrap().starts_with("app-"));
        assert!(producer_shares_cluster(&c));
    }

    #[test]
    fn without_a_client_id_the_clients_send_the_application_id() {
        let c = base().build().unwrap();
        assert_eq!(consumer_config(&c).unwrap().client.client_id, "app");
        assert_eq!(lane_consumer_config(&c).unwrap().client.client_id, "app");
        assert_eq!(producer_config(&c).unwrap().client.client_id, "app");
        let c = base()
            .consumer_property("client.id", "mine")
            .build()
            .unwrap();
        assert_eq!(consumer_config(&c).unwrap().client.client_id, "mine");
    }

    #[test]
    fn typed_consumer_and_producer_are_the_base() {
        let consumer = ConsumerConfig::builder()
            .bootstrap_servers("10.0.0.1:9092")
            .max_poll_records(7)
            .build()
            .unwrap();
        let producer = ProducerConfig::builder()
            .bootstrap_servers("10.0.0.1:9092")
            .batch_size(4096)
            .build()
            .unwrap();
        let c = base()
            .consumer(consumer)
            .producer(producer)
            .build()
            .unwrap();
        let cc = consumer_config(&c).unwrap();
        assert_eq!(cc.max_poll_records, 7);
        assert_eq!(cc.group_id.as_deref(), Some("app"));
        assert_eq!(producer_config(&c).unwrap().batch_size, 4096);
        assert!(
            !producer_shares_cluster(&c),
            "each brings its own client part"
        );
    }

    #[test]
    fn a_static_member_keeps_its_transactional_id_across_restarts() {
        let eos = || base().commit_mode(CommitMode::ExactlyOnce);
        let tid = |c: &StreamsConfig| producer_config(c).unwrap().transactional_id.unwrap();
        let c = eos()
            .consumer_property("group.instance.id", "pod-0")
            .build()
            .unwrap();
        assert_eq!(tid(&c), "app-pod-0");
        assert_eq!(tid(&c), tid(&c), "a restart fences its predecessor");
        let typed = ConsumerConfig::builder()
            .bootstrap_servers("10.0.0.1:9092")
            .group_instance_id("pod-1")
            .build()
            .unwrap();
        assert_eq!(tid(&eos().consumer(typed).build().unwrap()), "app-pod-1");
        // Without an instance id each instance gets its own.
        let c = eos().build().unwrap();
        let (a, b) = (tid(&c), tid(&c));
        assert!(a.starts_with("app-") && b.starts_with("app-"), "{a} {b}");
        assert_ne!(a, b);
    }

    #[test]
    fn client_keys_in_producer_properties_get_their_own_cluster() {
        let c = base()
            .producer_property("request.timeout.ms", "5000")
            .build()
            .unwrap();
        assert!(!producer_shares_cluster(&c));
        assert!(is_client_key("security.protocol", "SSL"));
        assert!(!is_client_key("linger.ms", "5"));
    }

    #[test]
    fn records_are_pipelined_only_where_the_producer_keeps_order() {
        let pc = |props: &[(&str, &str)]| {
            let mut b = base();
            for (k, v) in props {
                b = b.producer_property(*k, *v);
            }
            producer_config(&b.build().unwrap()).unwrap()
        };
        assert!(keeps_order(&pc(&[])), "idempotent by default");
        assert!(!keeps_order(&pc(&[
            ("enable.idempotence", "false"),
            ("max.in.flight.requests.per.connection", "5"),
        ])));
        assert!(keeps_order(&pc(&[
            ("enable.idempotence", "false"),
            ("max.in.flight.requests.per.connection", "1"),
        ])));
        // acks=1 turns idempotence off implicitly (as in Java).
        assert!(!keeps_order(&pc(&[("acks", "1")])));
    }
}
