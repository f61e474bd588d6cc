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
    /// `INVALID_PRODUCER_ID_MAPPING`: the coordinator has no producer id
    /// for this transactional id.
    pub const INVALID_PRODUCER_ID_MAPPING: KafkaCode = KafkaCode(49);
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
    /// `CLUSTER_AUTHORIZATION_FAILED`.
    pub const CLUSTER_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(31);
    /// `SASL_AUTHENTICATION_FAILED`.
    pub const SASL_AUTHENTICATION_FAILED: KafkaCode = KafkaCode(58);
    /// `ILLEGAL_GENERATION`: the group moved to a newer generation.
    pub const ILLEGAL_GENERATION: KafkaCode = KafkaCode(22);
    /// `UNKNOWN_MEMBER_ID`: the coordinator no longer knows this member.
    pub const UNKNOWN_MEMBER_ID: KafkaCode = KafkaCode(25);
    /// `REBALANCE_IN_PROGRESS`.
    pub const REBALANCE_IN_PROGRESS: KafkaCode = KafkaCode(27);
    /// `FENCED_MEMBER_EPOCH` (KIP-848): the member's epoch is stale.
    pub const FENCED_MEMBER_EPOCH: KafkaCode = KafkaCode(110);

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

    /// Whether an offset commit with this code failed because the group
    /// rebalanced or fenced the member (see [`Error::is_commit_failed`]).
    pub fn is_commit_failed(self) -> bool {
        matches!(
            self,
            KafkaCode::ILLEGAL_GENERATION
                | KafkaCode::UNKNOWN_MEMBER_ID
                | KafkaCode::REBALANCE_IN_PROGRESS
                | KafkaCode::FENCED_MEMBER_EPOCH
        )
    }

    /// Whether an ACL refused the operation (topic, group, cluster or
    /// transactional id authorization).
    pub fn is_authorization_failure(self) -> bool {
        matches!(self.0, 29 | 30 | 31 | 53)
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

/// A broker an error names: its node id, when known (a bootstrap address
/// has none until metadata names it), and its address, when known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct BrokerRef {
    /// The node id.
    pub id: Option<i32>,
    /// `host:port`.
    pub address: Option<String>,
}

impl BrokerRef {
    /// A broker with the given node id and `host:port` address.
    pub fn new(id: Option<i32>, address: Option<String>) -> BrokerRef {
        BrokerRef { id, address }
    }

    /// A broker known only by its node id (not in the current metadata).
    pub fn node(id: i32) -> BrokerRef {
        BrokerRef::new(Some(id), None)
    }
}

impl fmt::Display for BrokerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.id, &self.address) {
            (Some(id), Some(address)) => write!(f, "broker {id} ({address})"),
            (Some(id), None) => write!(f, "broker {id}"),
            (None, Some(address)) => write!(f, "bootstrap {address}"),
            (None, None) => f.write_str("unknown broker"),
        }
    }
}

/// Where an error arose: a broker, or a part of this client that acted with
/// no single broker involved.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// A broker: its node id and `host:port`, as far as they are known.
    Broker(BrokerRef),
    /// Several brokers, each asked in turn (e.g. a metadata refresh none
    /// answered).
    Brokers(Vec<BrokerRef>),
    /// The cluster as a whole: no broker was reached, or none in particular.
    Cluster,
    /// This client's own request encoding, before anything was sent.
    Client,
    /// The producer (its buffer, its transaction state), not a broker.
    Producer,
    /// The consumer (its assignment, its group membership), not a broker.
    Consumer,
    /// The streams runtime, not a broker.
    Streams,
    /// Named in words, where neither one broker nor a part above fits
    /// (e.g. a group member at its coordinator). `From<String>` and
    /// `From<&str>` give this variant.
    Other(String),
}

impl Origin {
    /// The broker, when one broker is the origin.
    pub fn broker(&self) -> Option<&BrokerRef> {
        match self {
            Origin::Broker(broker) => Some(broker),
            _ => None,
        }
    }

    /// The broker's node id, when one broker with a known id is the origin.
    pub fn broker_id(&self) -> Option<i32> {
        self.broker().and_then(|b| b.id)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Broker(broker) => broker.fmt(f),
            Origin::Brokers(brokers) => {
                for (i, broker) in brokers.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    broker.fmt(f)?;
                }
                Ok(())
            }
            Origin::Cluster => f.write_str("cluster"),
            Origin::Client => f.write_str("client"),
            Origin::Producer => f.write_str("producer"),
            Origin::Consumer => f.write_str("consumer"),
            Origin::Streams => f.write_str("streams"),
            Origin::Other(what) => f.write_str(what),
        }
    }
}

impl From<BrokerRef> for Origin {
    fn from(broker: BrokerRef) -> Origin {
        Origin::Broker(broker)
    }
}

impl From<String> for Origin {
    fn from(what: String) -> Origin {
        Origin::Other(what)
    }
}

impl From<&str> for Origin {
    fn from(what: &str) -> Origin {
        Origin::Other(what.to_owned())
    }
}

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

#[cfg(test)]
mod tests {
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
}
