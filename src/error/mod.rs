//! The crate's error type.
//!
//! Every error says what it concerns (an [`Origin`]: the broker or the part
//! of the client; the API, topic-partition or config key) and whether
//! trying again can help. Each variant's documentation says whether it is
//! retriable and what a caller should do; the predicates classify without
//! matching on variants:
//!
//! - [`Error::is_retriable`]: the same call may succeed later;
//! - [`Error::is_auth_failure`]: credentials or trust settings are wrong;
//! - [`Error::is_authorization_failure`]: an ACL refuses the operation;
//! - [`Error::is_commit_failed`]: the group moved on, do not retry the commit;
//! - [`Error::txn_kind`]: what a transactional producer must do next.
//!
//! Kafka error codes are mapped by [`KafkaCode`], following the protocol
//! guide's error table (<https://kafka.apache.org/protocol#protocol_error_codes>).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod code;
mod origin;
#[cfg(test)]
mod tests;

pub use code::KafkaCode;
pub use origin::{BrokerRef, Origin};

use crate::protocol::ProtocolError;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in purekafka.
///
/// Cheap to clone: one broken connection fails every pending request with the
/// same error. Each variant says whether [`Error::is_retriable`] holds for it
/// and what a caller should do.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A broker answered with a Kafka error code. Retriable when the code
    /// is ([`KafkaCode::is_retriable`]); the client already retried those
    /// within its timeouts, so a caller may retry the whole operation later.
    /// Otherwise read the code: it names what to fix.
    #[error("{context}: {code}")]
    Kafka {
        /// The code.
        code: KafkaCode,
        /// What it concerns: API, broker, topic-partition, group, ...
        context: String,
    },
    /// Bytes from the network could not be decoded (or a request not
    /// encoded). Not retriable: the connection was closed; report it, the
    /// broker or a proxy between is misbehaving.
    #[error("{broker}: {api}: {source}")]
    Protocol {
        /// The broker, e.g. `broker 1 (127.0.0.1:9092)`, or the client when
        /// encoding failed.
        broker: Origin,
        /// The API, e.g. `Fetch v16`.
        api: String,
        /// The decode failure.
        #[source]
        source: ProtocolError,
    },
    /// A socket operation failed. Retriable: the next call reconnects.
    #[error("{broker}: {op} failed: {source}")]
    Io {
        /// The broker.
        broker: Origin,
        /// What was being done (connect, write, read).
        op: &'static str,
        /// The I/O error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The connection closed while the request was pending. Retriable: the
    /// next call reconnects (a produce may then be duplicated unless the
    /// producer is idempotent).
    #[error("{broker}: connection closed{}: {reason}", api_suffix(.api))]
    Disconnected {
        /// The broker.
        broker: Origin,
        /// The API of the failed request, if one was pending.
        api: Option<String>,
        /// Why it closed.
        reason: String,
    },
    /// No answer within the configured timeout. Retriable; if it keeps
    /// happening, raise `config_key` or check the broker's health.
    #[error("{broker}: {api}: no response within {after:?} ({config_key})")]
    Timeout {
        /// The broker; several, comma-separated, when each was asked in
        /// turn; [`Origin::Cluster`] when none was reached, or the client
        /// part that waited (e.g. the producer's buffer).
        broker: Origin,
        /// What timed out.
        api: String,
        /// The timeout that expired.
        after: Duration,
        /// The config key that sets it.
        config_key: &'static str,
    },
    /// Client and broker share no version of an API, or the broker does not
    /// serve the API at all (it left it out of its ApiVersions answer). Not
    /// retriable: upgrade the broker or use a client that speaks its
    /// versions.
    #[error(
        "{broker}: {}; retrying will not help (upgrade the broker, or use a client that speaks its versions)",
        version_gap(api, *client_min, *client_max, *broker_min, *broker_max)
    )]
    UnsupportedVersion {
        /// The broker.
        broker: Origin,
        /// The API.
        api: String,
        /// Lowest version this client speaks.
        client_min: i16,
        /// Highest version this client speaks.
        client_max: i16,
        /// Lowest version the broker speaks; -1 when it does not serve the
        /// API at all.
        broker_min: i16,
        /// Highest version the broker speaks; -1 when it does not serve the
        /// API at all.
        broker_max: i16,
    },
    /// A configuration value is missing, unknown or malformed (including
    /// security settings the client cannot use, such as a key it cannot
    /// decrypt). Not retriable: fix `key`.
    #[error("config `{key}`: {reason}")]
    Config {
        /// The config key (Kafka property name).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A call the object's current state does not allow: a transaction call
    /// on a producer without `transactional.id`, a commit before
    /// `init_transactions`, an operation after the transaction was aborted.
    /// Not retriable as is: fix the order of calls.
    #[error("{origin}: {reason}")]
    InvalidState {
        /// The part of the client that refused the call.
        origin: Origin,
        /// What is not allowed, and what to call first.
        reason: String,
    },
    /// No broker from the bootstrap list or the metadata could be reached.
    /// Retriable (unless `last` is an authentication failure): brokers may
    /// come back; check `bootstrap.servers` if it persists.
    #[error("no broker reachable (tried {tried}): last error: {last}")]
    NoBrokerAvailable {
        /// The addresses tried.
        tried: String,
        /// The last failure.
        last: Box<Error>,
    },
    /// Metadata does not know the topic or partition (yet). Retriable: a
    /// topic being created appears after a metadata refresh; check the name
    /// if it persists.
    #[error("unknown topic-partition {topic}-{partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A record is larger than a configured bound, so it was never sent. Not
    /// retriable: split the record or raise `config_key` (and the broker's
    /// matching limit).
    #[error("record of {size} bytes for topic {topic} exceeds {config_key} ({limit})")]
    RecordTooLarge {
        /// The record's topic.
        topic: String,
        /// Its estimated encoded size.
        size: usize,
        /// The bound.
        limit: usize,
        /// The config key that sets the bound.
        config_key: &'static str,
    },
    /// A key or value could not be serialized. Not retriable: the record
    /// itself is at fault; skip or fix it.
    #[error("serializing the {part} for topic {topic}: {reason}")]
    Serialization {
        /// The record's topic.
        topic: String,
        /// `key` or `value`.
        part: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// A transactional producer error, classified by what the application
    /// must do next: read [`Error::txn_kind`] (see [`TxnErrorKind`]), not
    /// `is_retriable`, which is false.
    #[error("transaction {transactional_id}: {kind}: {cause}")]
    Transaction {
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// Fatal, abortable, indefinite, or a call in the wrong state.
        kind: TxnErrorKind,
        /// What went wrong underneath.
        cause: Box<Error>,
    },
    /// A broker rejected this client's credentials, or SASL could not be
    /// negotiated. Not retriable: retrying with the same credentials cannot
    /// succeed (and would hammer the broker); fix them. The message never
    /// contains a secret.
    #[error("{broker}: SASL {mechanism} authentication failed: {reason} ({})", credential_hint(.mechanism))]
    Authentication {
        /// The broker.
        broker: Origin,
        /// The SASL mechanism, e.g. `SCRAM-SHA-256`.
        mechanism: String,
        /// What went wrong, as the broker or the mechanism said it.
        reason: String,
    },
    /// A TLS handshake failed: unknown CA, wrong host name, bad client
    /// certificate. Not retriable: fix the `ssl.*` settings.
    #[error("{broker}: TLS handshake failed: {reason}")]
    Tls {
        /// The broker.
        broker: Origin,
        /// What went wrong.
        reason: String,
    },
    /// The client was shut down. Not retriable: create a new client.
    #[error("client is closed")]
    Closed,
    /// A consumer's fetch offset is outside the partition's log and
    /// `auto.offset.reset` is `none`. Not retriable: seek to a valid offset.
    #[error("fetch offset {offset} is out of range for {partition} (auto.offset.reset=none)")]
    OffsetOutOfRange {
        /// The partition.
        partition: crate::TopicPartition,
        /// The offset the consumer tried to fetch.
        offset: i64,
    },
    /// The partition's leader no longer has records the consumer already
    /// returned (its log was truncated after an unclean leader election,
    /// KIP-320) and `auto.offset.reset` is `none`. Not retriable: seek to
    /// decide where to go on. Records from `divergent_offset` on may differ
    /// from those returned.
    #[error(
        "log truncation on {partition}: records from offset {divergent_offset} on were \
         replaced, but the position is {offset} (auto.offset.reset=none: seek to go on)"
    )]
    LogTruncation {
        /// The partition.
        partition: crate::TopicPartition,
        /// The consumer's position.
        offset: i64,
        /// The first offset known to diverge.
        divergent_offset: i64,
    },
    /// A consumer has no position for a partition and `auto.offset.reset`
    /// is `none`. Not retriable: seek first.
    #[error("no offset for {partition} and auto.offset.reset=none: seek first")]
    NoOffset {
        /// The partition.
        partition: crate::TopicPartition,
    },
    /// The partition is not assigned to this consumer. Not retriable: use
    /// partitions from `assignment()`.
    #[error("{partition} is not assigned to this consumer")]
    NotAssigned {
        /// The partition.
        partition: crate::TopicPartition,
    },
    /// The group coordinator refused an offset commit because the group
    /// rebalanced or fenced this member (ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_MEMBER_EPOCH): the
    /// partitions may now belong to another member. Not retriable: retrying
    /// the same commit is wrong. Keep polling (the consumer rejoins) and
    /// re-read committed offsets. See [`Error::is_commit_failed`].
    #[error("{context}: {code}: commit failed because the group rebalanced or fenced this member; the partitions may have moved to another member, so rejoin and re-read committed offsets instead of retrying")]
    CommitFailed {
        /// The code the coordinator returned.
        code: KafkaCode,
        /// The commit: group, member, generation, partition.
        context: String,
    },
    /// Fetched records could not be decoded (CRC mismatch, malformed
    /// batch). Not retriable: the same bytes decode the same way; seek past
    /// `offset` to skip them, or report a broker or disk fault.
    #[error("{partition} at offset {offset}: {source}")]
    RecordDecode {
        /// The partition.
        partition: crate::TopicPartition,
        /// The fetch offset of the failed response.
        offset: i64,
        /// The decode failure.
        #[source]
        source: ProtocolError,
    },
}

/// What a transactional producer must do after an error (KIP-98; the
/// indefinite class follows Kafka's analyses of unknown EndTxn outcomes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnErrorKind {
    /// The producer was fenced or is not authorised: close it.
    Fatal,
    /// The transaction cannot commit: abort it, then retry the work.
    Abortable,
    /// The outcome (commit or abort) is unknown: call `init_transactions`
    /// again before going on; retrying blindly could end the wrong
    /// transaction.
    Indefinite,
    /// The call is not allowed in the producer's current state.
    InvalidState,
}

impl fmt::Display for TxnErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TxnErrorKind::Fatal => "fatal, close the producer",
            TxnErrorKind::Abortable => "abortable, abort the transaction and retry it",
            TxnErrorKind::Indefinite => {
                "outcome unknown, call init_transactions again before going on"
            }
            TxnErrorKind::InvalidState => "not allowed in this state",
        })
    }
}

/// The settings to check when `mechanism` fails: the user's credentials for
/// PLAIN and SCRAM, the token settings for OAUTHBEARER (KIP-768, MSK IAM).
fn credential_hint(mechanism: &str) -> &'static str {
    if mechanism.eq_ignore_ascii_case("OAUTHBEARER") {
        "check sasl.mechanism, the token provider or the sasl.oauthbearer.* / sasl.login.* settings"
    } else {
        "check sasl.mechanism, sasl.username and sasl.password"
    }
}

impl Error {
    /// The transactional error class, if this is a transactional error.
    pub fn txn_kind(&self) -> Option<TxnErrorKind> {
        match self {
            Error::Transaction { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// What an [`Error::UnsupportedVersion`] lacks: a version range in common,
/// or the API itself (a negative broker range: absent from ApiVersions).
fn version_gap(
    api: &str,
    client_min: i16,
    client_max: i16,
    broker_min: i16,
    broker_max: i16,
) -> String {
    if broker_min < 0 || broker_max < 0 {
        format!(
            "the broker does not support {api} at all (absent from its ApiVersions answer; \
             client supports {client_min}..={client_max})"
        )
    } else {
        format!(
            "no common version of {api}: client supports {client_min}..={client_max}, \
             broker supports {broker_min}..={broker_max}"
        )
    }
}

fn api_suffix(api: &Option<String>) -> String {
    api.as_ref()
        .map(|a| format!(" during {a}"))
        .unwrap_or_default()
}

impl Error {
    /// Whether trying the same operation again may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => code.is_retriable(),
            Error::Io { .. }
            | Error::Disconnected { .. }
            | Error::Timeout { .. }
            | Error::NoBrokerAvailable { .. }
            | Error::UnknownPartition { .. } => true,
            Error::Protocol { .. }
            | Error::UnsupportedVersion { .. }
            | Error::Config { .. }
            | Error::InvalidState { .. }
            | Error::Authentication { .. }
            | Error::Tls { .. }
            | Error::RecordTooLarge { .. }
            | Error::Transaction { .. }
            | Error::Serialization { .. }
            | Error::Closed
            | Error::OffsetOutOfRange { .. }
            | Error::LogTruncation { .. }
            | Error::NoOffset { .. }
            | Error::NotAssigned { .. }
            | Error::CommitFailed { .. }
            | Error::RecordDecode { .. } => false,
        }
    }

    /// The Kafka error code, when a broker returned one.
    pub fn kafka_code(&self) -> Option<KafkaCode> {
        match self {
            Error::Kafka { code, .. } | Error::CommitFailed { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether an offset commit failed because the group moved on: the
    /// group rebalanced or fenced this member, so the partitions may now
    /// belong to another member. True for [`Error::CommitFailed`] and for a
    /// plain [`Error::Kafka`] with one of its codes (ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_MEMBER_EPOCH), as a
    /// transactional offset commit returns them. Retrying the same commit is
    /// wrong: keep polling (the member rejoins) and re-read committed
    /// offsets.
    pub fn is_commit_failed(&self) -> bool {
        match self {
            Error::CommitFailed { .. } => true,
            Error::Kafka { code, .. } => code.is_commit_failed(),
            _ => false,
        }
    }

    /// Whether the client's credentials or trust settings are wrong, so no
    /// broker will accept it: a SASL authentication failure (from the
    /// mechanism or `SASL_AUTHENTICATION_FAILED`) or a TLS handshake
    /// failure, also as the last error of [`Error::NoBrokerAvailable`].
    /// Configuration mistakes are [`Error::Config`], ACL refusals
    /// [`Error::is_authorization_failure`].
    pub fn is_auth_failure(&self) -> bool {
        match self {
            Error::Authentication { .. } | Error::Tls { .. } => true,
            Error::Kafka { code, .. } => *code == KafkaCode::SASL_AUTHENTICATION_FAILED,
            Error::NoBrokerAvailable { last, .. } => last.is_auth_failure(),
            _ => false,
        }
    }

    /// Whether an ACL refused the operation (`*_AUTHORIZATION_FAILED`),
    /// also inside a transactional error. Not retriable: grant the ACL.
    pub fn is_authorization_failure(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => code.is_authorization_failure(),
            Error::Transaction { cause, .. } => cause.is_authorization_failure(),
            _ => false,
        }
    }

    /// Where the error arose, when a broker or a part of the client is
    /// named.
    pub fn origin(&self) -> Option<&Origin> {
        match self {
            Error::Protocol { broker, .. }
            | Error::Io { broker, .. }
            | Error::Disconnected { broker, .. }
            | Error::Timeout { broker, .. }
            | Error::UnsupportedVersion { broker, .. }
            | Error::Authentication { broker, .. }
            | Error::Tls { broker, .. } => Some(broker),
            Error::InvalidState { origin, .. } => Some(origin),
            _ => None,
        }
    }

    /// Whether this error means cached partition leadership is stale.
    pub fn invalidates_metadata(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => code.invalidates_metadata(),
            Error::UnknownPartition { .. } => true,
            _ => false,
        }
    }

    /// Builds [`Error::Kafka`] from a wire code, or `Ok(())` for 0.
    pub fn check(code: i16, context: impl FnOnce() -> String) -> Result<()> {
        match KafkaCode::from_code(code) {
            None => Ok(()),
            Some(code) => Err(Error::Kafka {
                code,
                context: context(),
            }),
        }
    }

    /// A config error naming `key`.
    pub fn config(key: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Config {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// A [`Error::Timeout`] for `what`, retried until `config_key`'s bound
    /// `after` expired, naming the last failure seen (its code, subject and
    /// broker) so the caller learns why the retries did not succeed.
    pub(crate) fn retries_timed_out(
        origin: Origin,
        what: impl fmt::Display,
        after: Duration,
        config_key: &'static str,
        last: Option<&Error>,
    ) -> Error {
        Error::Timeout {
            broker: origin,
            api: match last {
                Some(e) => format!("{what} (last error: {e})"),
                None => what.to_string(),
            },
            after,
            config_key,
        }
    }

    /// A call `origin`'s current state does not allow.
    pub fn invalid_state(origin: Origin, reason: impl Into<String>) -> Error {
        Error::InvalidState {
            origin,
            reason: reason.into(),
        }
    }
}
