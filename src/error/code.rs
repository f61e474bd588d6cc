//! Kafka error codes: names, retriability and the classes the clients act
//! on, after the protocol guide's error table
//! (<https://kafka.apache.org/protocol#protocol_error_codes>).

use std::fmt;

use kafka_protocol::error::ResponseError;

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
    /// `STALE_MEMBER_EPOCH` (KIP-848, KIP-1071): a commit or offset fetch
    /// carried a member epoch that is not the member's current one.
    pub const STALE_MEMBER_EPOCH: KafkaCode = KafkaCode(113);

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
    /// rebalanced or fenced the member (see [`Error::is_commit_failed`](super::Error::is_commit_failed)).
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
