//! The error type's classes, messages and origins.

use super::*;

#[test]
fn authentication_errors_point_at_the_mechanisms_settings() {
    let fail = |mechanism: &str| Error::Authentication {
        broker: BrokerRef::new(Some(1), Some("b1:9092".into())).into(),
        mechanism: mechanism.to_owned(),
        reason: "denied".to_owned(),
    };
    let scram = fail("SCRAM-SHA-256").to_string();
    assert!(scram.contains("sasl.username and sasl.password"), "{scram}");
    let oauth = fail("OAUTHBEARER").to_string();
    assert!(oauth.contains("sasl.oauthbearer."), "{oauth}");
    assert!(!oauth.contains("sasl.password"), "{oauth}");
}

#[test]
fn codes_have_names_and_retriability() {
    let nlf = KafkaCode::from_code(6).unwrap();
    assert_eq!(nlf.name(), "NotLeaderOrFollower");
    assert!(nlf.is_retriable());
    assert!(nlf.invalidates_metadata());
    let fenced = KafkaCode::from_code(90).unwrap();
    assert_eq!(fenced.name(), "ProducerFenced");
    assert!(!fenced.is_retriable());
    let abortable = KafkaCode::from_code(120).unwrap();
    assert_eq!(abortable.to_string(), "TransactionAbortable (120)");
    assert!(KafkaCode::from_code(0).is_none());
    assert_eq!(KafkaCode::from_code(999).unwrap().name(), "Unknown");
    assert!(!KafkaCode::from_code(999).unwrap().is_retriable());
}

#[test]
fn every_code_up_to_133_is_named() {
    for code in (-1..=133).filter(|c| *c != 0) {
        let k = KafkaCode::from_code(code).unwrap();
        assert_ne!(k.name(), "Unknown", "code {code} has no name");
    }
}

#[test]
fn errors_name_their_subject() {
    let e = Error::check(3, || "Produce to orders-2 on broker 1".into()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Produce to orders-2 on broker 1: UnknownTopicOrPartition (3)"
    );
    assert!(e.is_retriable());
    let c = Error::config("linger.ms", "not a number: x");
    assert_eq!(c.to_string(), "config `linger.ms`: not a number: x");
    assert!(!c.is_retriable());
    assert!(
        !c.is_auth_failure(),
        "a config error is not an auth failure"
    );
}

#[test]
fn invalid_state_names_its_origin_and_is_not_retriable() {
    let e = Error::invalid_state(Origin::Producer, "call init_transactions first");
    assert_eq!(e.to_string(), "producer: call init_transactions first");
    assert_eq!(e.origin(), Some(&Origin::Producer));
    assert!(!e.is_retriable());
    assert!(!e.is_auth_failure());
}

#[test]
fn commit_failed_covers_the_variant_and_the_plain_codes() {
    let variant = Error::CommitFailed {
        code: KafkaCode::ILLEGAL_GENERATION,
        context: "OffsetCommit".into(),
    };
    assert!(variant.is_commit_failed());
    for code in [22, 25, 27, 110] {
        let plain = Error::check(code, || "TxnOffsetCommit".into()).unwrap_err();
        assert!(plain.is_commit_failed(), "code {code}");
    }
    let other = Error::check(7, || "OffsetCommit".into()).unwrap_err();
    assert!(!other.is_commit_failed());
}

#[test]
fn unsupported_version_says_whether_the_api_is_missing_or_the_range() {
    let err = |broker_min, broker_max| Error::UnsupportedVersion {
        broker: "broker 1 (127.0.0.1:9092)".into(),
        api: "Produce".into(),
        client_min: 3,
        client_max: 12,
        broker_min,
        broker_max,
    };
    let missing = err(-1, -1);
    assert!(!missing.is_retriable());
    assert_eq!(
        missing.to_string(),
        "broker 1 (127.0.0.1:9092): the broker does not support Produce at all (absent \
         from its ApiVersions answer; client supports 3..=12); retrying will not help \
         (upgrade the broker, or use a client that speaks its versions)"
    );
    let older = err(0, 2);
    assert!(!older.is_retriable());
    assert_eq!(
        older.to_string(),
        "broker 1 (127.0.0.1:9092): no common version of Produce: client supports 3..=12, \
         broker supports 0..=2; retrying will not help (upgrade the broker, or use a \
         client that speaks its versions)"
    );
}

#[test]
fn auth_and_authorization_are_security_failures_only() {
    let sasl = Error::check(58, || "SaslAuthenticate".into()).unwrap_err();
    assert!(sasl.is_auth_failure());
    let tls = Error::Tls {
        broker: BrokerRef::new(Some(1), Some("127.0.0.1:9093".into())).into(),
        reason: "unknown CA".into(),
    };
    assert!(tls.is_auth_failure());
    assert_eq!(tls.origin().and_then(Origin::broker_id), Some(1));
    assert!(
        tls.to_string()
            .starts_with("broker 1 (127.0.0.1:9093): TLS"),
        "{tls}"
    );
    let nba = Error::NoBrokerAvailable {
        tried: "a:1".into(),
        last: Box::new(tls),
    };
    assert!(nba.is_auth_failure());
    let acl = Error::check(29, || "Produce to t-0".into()).unwrap_err();
    assert!(acl.is_authorization_failure());
    assert!(!acl.is_auth_failure());
    let timeout = Error::Timeout {
        broker: Origin::Cluster,
        api: "Metadata".into(),
        after: Duration::from_secs(1),
        config_key: "request.timeout.ms",
    };
    assert!(!timeout.is_auth_failure() && !timeout.is_authorization_failure());
    assert_eq!(
        timeout.to_string(),
        "cluster: Metadata: no response within 1s (request.timeout.ms)"
    );
}

/// The origin is typed: a broker's id and address, as far as known;
/// several brokers asked in turn; it displays as the labels did.
#[test]
fn a_broker_origin_carries_its_id_and_address() {
    let full = Origin::from(BrokerRef::new(Some(3), Some("h:9092".into())));
    assert_eq!(full.broker_id(), Some(3));
    assert_eq!(full.to_string(), "broker 3 (h:9092)");
    let bootstrap = Origin::from(BrokerRef::new(None, Some("h:9092".into())));
    assert_eq!(bootstrap.broker_id(), None);
    assert_eq!(bootstrap.to_string(), "bootstrap h:9092");
    assert_eq!(Origin::from(BrokerRef::node(4)).to_string(), "broker 4");
    let asked = Origin::Brokers(vec![BrokerRef::node(1), BrokerRef::node(2)]);
    assert_eq!(asked.to_string(), "broker 1, broker 2");
    assert_eq!(asked.broker(), None, "no single broker");
    assert_eq!(Origin::from("group g").broker(), None);
}
