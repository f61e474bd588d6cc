//! The crate's error type.
//!
//! Every error says what it concerns (broker, API, topic-partition or config
//! key) and whether trying again can help ([`Error::is_retriable`]). Kafka
//! error codes are mapped by [`KafkaCode`], following the protocol guide's
//! error table (<https://kafka.apache.org/protocol#protocol_error_codes>).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;

use crate::protocol::ProtocolError;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A Kafka error code as returned by a broker (never 0, which means success).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KafkaCode(i16);

/// Codes newer than the `kafka-protocol` crate's table: (code, name, retriable).
const NEWER_CODES: &[(i16, &str, bool)] = &[
    (114, "MismatchedEndpointType", false),
    (115, "UnsupportedEndpointType", false),
    (116, "UnknownControllerId", false),
    (117, "UnknownSubscriptionId", false),
    (118, "TelemetryTooLarge", false),
    (119, "InvalidRegistration", false),
    (120, "TransactionAbortable", false),
    (121, "InvalidRecordState", false),
    (122, "ShareSessionNotFound", true),
    (123, "InvalidShareSessionEpoch", true),
    (124, "FencedStateEpoch", false),
    (125, "InvalidVoterKey", false),
    (126, "DuplicateVoter", false),
    (127, "VoterNotFound", false),
    (128, "InvalidRegularExpression", false),
    (129, "RebootstrapRequired", false),
    (130, "StreamsInvalidTopology", false),
    (131, "StreamsInvalidTopologyEpoch", false),
    (132, "StreamsTopologyFenced", false),
    (133, "ShareSessionLimitReached", true),
];

impl KafkaCode {
    /// `OFFSET_OUT_OF_RANGE`.
    pub const OFFSET_OUT_OF_RANGE: KafkaCode = KafkaCode(1);
    /// `UNKNOWN_TOPIC_OR_PARTITION`.
    pub const UNKNOWN_TOPIC_OR_PARTITION: KafkaCode = KafkaCode(3);
    /// `LEADER_NOT_AVAILABLE`.
    pub const LEADER_NOT_AVAILABLE: KafkaCode = KafkaCode(5);
    /// `NOT_LEADER_OR_FOLLOWER`.
    pub const NOT_LEADER_OR_FOLLOWER: KafkaCode = KafkaCode(6);
    /// `REQUEST_TIMED_OUT`.
    pub const REQUEST_TIMED_OUT: KafkaCode = KafkaCode(7);
    /// `MESSAGE_TOO_LARGE`.
    pub const MESSAGE_TOO_LARGE: KafkaCode = KafkaCode(10);
    /// `COORDINATOR_LOAD_IN_PROGRESS`.
    pub const COORDINATOR_LOAD_IN_PROGRESS: KafkaCode = KafkaCode(14);
    /// `COORDINATOR_NOT_AVAILABLE`.
    pub const COORDINATOR_NOT_AVAILABLE: KafkaCode = KafkaCode(15);
    /// `NOT_COORDINATOR`.
    pub const NOT_COORDINATOR: KafkaCode = KafkaCode(16);
    /// `UNSUPPORTED_VERSION`.
    pub const UNSUPPORTED_VERSION: KafkaCode = KafkaCode(35);
    /// `TOPIC_ALREADY_EXISTS`.
    pub const TOPIC_ALREADY_EXISTS: KafkaCode = KafkaCode(36);
    /// `UNKNOWN_TOPIC_ID`.
    pub const UNKNOWN_TOPIC_ID: KafkaCode = KafkaCode(100);
    /// `FENCED_LEADER_EPOCH`.
    pub const FENCED_LEADER_EPOCH: KafkaCode = KafkaCode(74);
    /// `UNKNOWN_LEADER_EPOCH`.
    pub const UNKNOWN_LEADER_EPOCH: KafkaCode = KafkaCode(75);
    /// `RECORD_LIST_TOO_LARGE`.
    pub const RECORD_LIST_TOO_LARGE: KafkaCode = KafkaCode(18);
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`: the broker saw a gap in an idempotent
    /// producer's sequence numbers.
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaCode = KafkaCode(45);
    /// `DUPLICATE_SEQUENCE_NUMBER`: the batch was already written.
    pub const DUPLICATE_SEQUENCE_NUMBER: KafkaCode = KafkaCode(46);
    /// `INVALID_PRODUCER_EPOCH`.
    pub const INVALID_PRODUCER_EPOCH: KafkaCode = KafkaCode(47);
    /// `UNKNOWN_PRODUCER_ID`: the broker no longer has this producer's state.
    pub const UNKNOWN_PRODUCER_ID: KafkaCode = KafkaCode(59);
    /// `PRODUCER_FENCED`.
    pub const PRODUCER_FENCED: KafkaCode = KafkaCode(90);
    /// `INVALID_TXN_STATE`.
    pub const INVALID_TXN_STATE: KafkaCode = KafkaCode(48);
    /// `TOPIC_AUTHORIZATION_FAILED`: the principal lacks the ACL for the
    /// operation on the topic.
    pub const TOPIC_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(29);
    /// `GROUP_AUTHORIZATION_FAILED`.
    pub const GROUP_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(30);
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`.
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(53);
    /// `CONCURRENT_TRANSACTIONS`: the previous transaction is still ending.
    pub const CONCURRENT_TRANSACTIONS: KafkaCode = KafkaCode(51);
    /// `ELECTION_NOT_NEEDED`: the partition already has the leader an
    /// election would pick.
    pub const ELECTION_NOT_NEEDED: KafkaCode = KafkaCode(84);
    /// `TRANSACTION_ABORTABLE` (KIP-890).
    pub const TRANSACTION_ABORTABLE: KafkaCode = KafkaCode(120);

    /// Wraps a non-zero wire code; `None` for 0 (success).
    pub fn from_code(code: i16) -> Option<KafkaCode> {
        (code != 0).then_some(KafkaCode(code))
    }

    /// The wire code.
    pub fn code(self) -> i16 {
        self.0
    }

    /// The error's name, as in Kafka's `Errors` table (CamelCase).
    pub fn name(self) -> &'static str {
        if let Some((_, name, _)) = NEWER_CODES.iter().find(|(c, _, _)| *c == self.0) {
            return name;
        }
        match ResponseError::try_from_code(self.0) {
            Some(ResponseError::Unknown(_)) | None => "Unknown",
            Some(known) => known_name(known),
        }
    }

    /// Whether the protocol marks this error retriable: the same request may
    /// succeed later (possibly after a metadata refresh).
    pub fn is_retriable(self) -> bool {
        // CONCURRENT_TRANSACTIONS: the previous transaction's markers are
        // still being written; the Java client retries it after a backoff
        // (ConcurrentTransactionsException is a RetriableException).
        if self.0 == 51 {
            return true;
        }
        if let Some((_, _, retriable)) = NEWER_CODES.iter().find(|(c, _, _)| *c == self.0) {
            return *retriable;
        }
        ResponseError::try_from_code(self.0).is_some_and(|e| e.is_retriable())
    }

    /// Whether this error means the client's view of partition leadership is
    /// stale, so metadata should be refreshed before retrying.
    pub fn invalidates_metadata(self) -> bool {
        matches!(self.0, 3 | 5 | 6 | 74 | 75 | 100 | 103 | 108)
    }

    /// Whether this error means the group or transaction coordinator moved.
    pub fn invalidates_coordinator(self) -> bool {
        matches!(self.0, 15 | 16)
    }
}

fn known_name(e: ResponseError) -> &'static str {
    // `ResponseError` only exposes its name through `Display` (an allocation);
    // a static table keeps `name()` allocation-free.
    macro_rules! names {
        ($($v:ident),* $(,)?) => {
            match e { $(ResponseError::$v => stringify!($v),)* _ => "Unknown" }
        };
    }
    names!(
        UnknownServerError,
        OffsetOutOfRange,
        CorruptMessage,
        UnknownTopicOrPartition,
        InvalidFetchSize,
        LeaderNotAvailable,
        NotLeaderOrFollower,
        RequestTimedOut,
        BrokerNotAvailable,
        ReplicaNotAvailable,
        MessageTooLarge,
        StaleControllerEpoch,
        OffsetMetadataTooLarge,
        NetworkException,
        CoordinatorLoadInProgress,
        CoordinatorNotAvailable,
        NotCoordinator,
        InvalidTopicException,
        RecordListTooLarge,
        NotEnoughReplicas,
        NotEnoughReplicasAfterAppend,
        InvalidRequiredAcks,
        IllegalGeneration,
        InconsistentGroupProtocol,
        InvalidGroupId,
        UnknownMemberId,
        InvalidSessionTimeout,
        RebalanceInProgress,
        InvalidCommitOffsetSize,
        TopicAuthorizationFailed,
        GroupAuthorizationFailed,
        ClusterAuthorizationFailed,
        InvalidTimestamp,
        UnsupportedSaslMechanism,
        IllegalSaslState,
        UnsupportedVersion,
        TopicAlreadyExists,
        InvalidPartitions,
        InvalidReplicationFactor,
        InvalidReplicaAssignment,
        InvalidConfig,
        NotController,
        InvalidRequest,
        UnsupportedForMessageFormat,
        PolicyViolation,
        OutOfOrderSequenceNumber,
        DuplicateSequenceNumber,
        InvalidProducerEpoch,
        InvalidTxnState,
        InvalidProducerIdMapping,
        InvalidTransactionTimeout,
        ConcurrentTransactions,
        TransactionCoordinatorFenced,
        TransactionalIdAuthorizationFailed,
        SecurityDisabled,
        OperationNotAttempted,
        KafkaStorageError,
        LogDirNotFound,
        SaslAuthenticationFailed,
        UnknownProducerId,
        ReassignmentInProgress,
        DelegationTokenAuthDisabled,
        DelegationTokenNotFound,
        DelegationTokenOwnerMismatch,
        DelegationTokenRequestNotAllowed,
        DelegationTokenAuthorizationFailed,
        DelegationTokenExpired,
        InvalidPrincipalType,
        NonEmptyGroup,
        GroupIdNotFound,
        FetchSessionIdNotFound,
        InvalidFetchSessionEpoch,
        ListenerNotFound,
        TopicDeletionDisabled,
        FencedLeaderEpoch,
        UnknownLeaderEpoch,
        UnsupportedCompressionType,
        StaleBrokerEpoch,
        OffsetNotAvailable,
        MemberIdRequired,
        PreferredLeaderNotAvailable,
        GroupMaxSizeReached,
        FencedInstanceId,
        EligibleLeadersNotAvailable,
        ElectionNotNeeded,
        NoReassignmentInProgress,
        GroupSubscribedToTopic,
        InvalidRecord,
        UnstableOffsetCommit,
        ThrottlingQuotaExceeded,
        ProducerFenced,
        ResourceNotFound,
        DuplicateResource,
        UnacceptableCredential,
        InconsistentVoterSet,
        InvalidUpdateVersion,
        FeatureUpdateFailed,
        PrincipalDeserializationFailure,
        SnapshotNotFound,
        PositionOutOfRange,
        UnknownTopicId,
        DuplicateBrokerRegistration,
        BrokerIdNotRegistered,
        InconsistentTopicId,
        InconsistentClusterId,
        TransactionalIdNotFound,
        FetchSessionTopicIdError,
        IneligibleReplica,
        NewLeaderElected,
        OffsetMovedToTieredStorage,
        FencedMemberEpoch,
        UnreleasedInstanceId,
        UnsupportedAssignor,
        StaleMemberEpoch,
    )
}

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl fmt::Debug for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Everything that can go wrong in purekafka.
///
/// Cheap to clone: one broken connection fails every pending request with the
/// same error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A broker answered with a Kafka error code.
    #[error("{context}: {code}")]
    Kafka {
        /// The code.
        code: KafkaCode,
        /// What it concerns: API, broker, topic-partition, group, ...
        context: String,
    },
    /// Bytes from the network could not be decoded (or a request not encoded).
    #[error("{broker}: {api}: {source}")]
    Protocol {
        /// The broker, e.g. `broker 1 (127.0.0.1:9092)`.
        broker: String,
        /// The API, e.g. `Fetch v16`.
        api: String,
        /// The decode failure.
        #[source]
        source: ProtocolError,
    },
    /// A socket operation failed.
    #[error("{broker}: {op} failed: {source}")]
    Io {
        /// The broker.
        broker: String,
        /// What was being done (connect, write, read).
        op: &'static str,
        /// The I/O error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The connection closed while the request was pending.
    #[error("{broker}: connection closed{}: {reason}", api_suffix(.api))]
    Disconnected {
        /// The broker.
        broker: String,
        /// The API of the failed request, if one was pending.
        api: Option<String>,
        /// Why it closed.
        reason: String,
    },
    /// No answer within the configured timeout.
    #[error("{broker}: {api}: no response within {after:?} ({config_key})")]
    Timeout {
        /// The broker; several, comma-separated, when each was asked in
        /// turn; `cluster` when none was reached.
        broker: String,
        /// What timed out.
        api: String,
        /// The timeout that expired.
        after: Duration,
        /// The config key that sets it.
        config_key: &'static str,
    },
    /// Client and broker share no version of an API.
    #[error("{broker}: no common version of {api}: client supports {client_min}..={client_max}, broker supports {broker_min}..={broker_max}")]
    UnsupportedVersion {
        /// The broker.
        broker: String,
        /// The API.
        api: String,
        /// Lowest version this client speaks.
        client_min: i16,
        /// Highest version this client speaks.
        client_max: i16,
        /// Lowest version the broker speaks.
        broker_min: i16,
        /// Highest version the broker speaks.
        broker_max: i16,
    },
    /// A configuration value is missing, unknown or malformed.
    #[error("config `{key}`: {reason}")]
    Config {
        /// The config key (Kafka property name).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// No broker from the bootstrap list or the metadata could be reached.
    #[error("no broker reachable (tried {tried}): last error: {last}")]
    NoBrokerAvailable {
        /// The addresses tried.
        tried: String,
        /// The last failure.
        last: Box<Error>,
    },
    /// Metadata does not know the topic or partition (yet).
    #[error("unknown topic-partition {topic}-{partition}")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// A record is larger than a configured bound, so it was never sent.
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
    /// A key or value could not be serialized.
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
    /// must do next (see [`TxnErrorKind`]).
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
    /// succeed (and would hammer the broker). The message never contains a
    /// secret.
    #[error("{broker}: SASL {mechanism} authentication failed: {reason} (check sasl.mechanism, sasl.username and sasl.password)")]
    Authentication {
        /// The broker.
        broker: String,
        /// The SASL mechanism, e.g. `SCRAM-SHA-256`.
        mechanism: String,
        /// What went wrong, as the broker or the mechanism said it.
        reason: String,
    },
    /// A TLS handshake failed: unknown CA, wrong host name, bad client
    /// certificate. Not retriable.
    #[error("{broker}: TLS handshake failed: {reason}")]
    Tls {
        /// The broker.
        broker: String,
        /// What went wrong.
        reason: String,
    },
    /// The client was shut down.
    #[error("client is closed")]
    Closed,
    /// A consumer's fetch offset is outside the partition's log and
    /// `auto.offset.reset` is `none`.
    #[error("fetch offset {offset} is out of range for {partition} (auto.offset.reset=none)")]
    OffsetOutOfRange {
        /// The partition.
        partition: crate::TopicPartition,
        /// The offset the consumer tried to fetch.
        offset: i64,
    },
    /// The partition's leader no longer has records the consumer already
    /// returned (its log was truncated after an unclean leader election,
    /// KIP-320) and `auto.offset.reset` is `none`: seek to decide where to
    /// go on. Records from `divergent_offset` on may differ from those
    /// returned.
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
    /// is `none`: seek first.
    #[error("no offset for {partition} and auto.offset.reset=none: seek first")]
    NoOffset {
        /// The partition.
        partition: crate::TopicPartition,
    },
    /// The partition is not assigned to this consumer.
    #[error("{partition} is not assigned to this consumer")]
    NotAssigned {
        /// The partition.
        partition: crate::TopicPartition,
    },
    /// The group coordinator refused an offset commit because the group
    /// rebalanced or fenced this member (ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_MEMBER_EPOCH): the
    /// partitions may now belong to another member, so retrying the same
    /// commit is wrong. Keep polling (the consumer rejoins) and re-read
    /// committed offsets.
    #[error("{context}: {code}: commit failed because the group rebalanced or fenced this member; the partitions may have moved to another member, so rejoin and re-read committed offsets instead of retrying")]
    CommitFailed {
        /// The code the coordinator returned.
        code: KafkaCode,
        /// The commit: group, member, generation, partition.
        context: String,
    },
    /// Fetched records could not be decoded (CRC mismatch, malformed batch).
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

impl Error {
    /// The transactional error class, if this is a transactional error.
    pub fn txn_kind(&self) -> Option<TxnErrorKind> {
        match self {
            Error::Transaction { kind, .. } => Some(*kind),
            _ => None,
        }
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

    /// Whether an offset commit failed because the group moved on
    /// ([`Error::CommitFailed`]).
    pub fn is_commit_failed(&self) -> bool {
        matches!(self, Error::CommitFailed { .. })
    }

    /// Whether this is an authentication or TLS failure, or security
    /// settings the client cannot use (a key it cannot decrypt): the
    /// client's credentials or trust settings are wrong, so no broker will
    /// accept it.
    pub fn is_auth_failure(&self) -> bool {
        match self {
            Error::Authentication { .. } | Error::Tls { .. } | Error::Config { .. } => true,
            Error::NoBrokerAvailable { last, .. } => last.is_auth_failure(),
            _ => false,
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
