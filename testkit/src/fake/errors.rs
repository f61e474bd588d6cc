//! The Kafka error codes the fake answers with
//! (<https://kafka.apache.org/protocol#protocol_error_codes>).

/// A Kafka error code, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(i16)]
pub enum Code {
    /// No error.
    None = 0,
    /// OFFSET_OUT_OF_RANGE.
    OffsetOutOfRange = 1,
    /// CORRUPT_MESSAGE.
    CorruptMessage = 2,
    /// UNKNOWN_TOPIC_OR_PARTITION.
    UnknownTopicOrPartition = 3,
    /// LEADER_NOT_AVAILABLE.
    LeaderNotAvailable = 5,
    /// NOT_LEADER_OR_FOLLOWER.
    NotLeaderOrFollower = 6,
    /// MESSAGE_TOO_LARGE.
    MessageTooLarge = 10,
    /// COORDINATOR_NOT_AVAILABLE.
    CoordinatorNotAvailable = 15,
    /// NOT_COORDINATOR.
    NotCoordinator = 16,
    /// TOPIC_AUTHORIZATION_FAILED.
    TopicAuthorizationFailed = 29,
    /// GROUP_AUTHORIZATION_FAILED.
    GroupAuthorizationFailed = 30,
    /// CLUSTER_AUTHORIZATION_FAILED.
    ClusterAuthorizationFailed = 31,
    /// INVALID_TOPIC_EXCEPTION.
    InvalidTopic = 17,
    /// ILLEGAL_GENERATION.
    IllegalGeneration = 22,
    /// INCONSISTENT_GROUP_PROTOCOL.
    InconsistentGroupProtocol = 23,
    /// UNKNOWN_MEMBER_ID.
    UnknownMemberId = 25,
    /// INVALID_SESSION_TIMEOUT.
    InvalidSessionTimeout = 26,
    /// REBALANCE_IN_PROGRESS.
    RebalanceInProgress = 27,
    /// UNSUPPORTED_SASL_MECHANISM.
    UnsupportedSaslMechanism = 33,
    /// ILLEGAL_SASL_STATE.
    IllegalSaslState = 34,
    /// UNSUPPORTED_VERSION.
    UnsupportedVersion = 35,
    /// TOPIC_ALREADY_EXISTS.
    TopicAlreadyExists = 36,
    /// INVALID_PARTITIONS.
    InvalidPartitions = 37,
    /// INVALID_REPLICATION_FACTOR.
    InvalidReplicationFactor = 38,
    /// INVALID_CONFIG.
    InvalidConfig = 40,
    /// INVALID_REQUEST.
    InvalidRequest = 42,
    /// OUT_OF_ORDER_SEQUENCE_NUMBER.
    OutOfOrderSequenceNumber = 45,
    /// INVALID_PRODUCER_EPOCH.
    InvalidProducerEpoch = 47,
    /// INVALID_TXN_STATE.
    InvalidTxnState = 48,
    /// INVALID_PRODUCER_ID_MAPPING.
    InvalidProducerIdMapping = 49,
    /// INVALID_TRANSACTION_TIMEOUT.
    InvalidTransactionTimeout = 50,
    /// CONCURRENT_TRANSACTIONS.
    ConcurrentTransactions = 51,
    /// OPERATION_NOT_ATTEMPTED.
    OperationNotAttempted = 55,
    /// UNKNOWN_PRODUCER_ID.
    UnknownProducerId = 59,
    /// NON_EMPTY_GROUP.
    NonEmptyGroup = 68,
    /// GROUP_ID_NOT_FOUND.
    GroupIdNotFound = 69,
    /// FETCH_SESSION_ID_NOT_FOUND.
    FetchSessionIdNotFound = 70,
    /// INVALID_FETCH_SESSION_EPOCH.
    InvalidFetchSessionEpoch = 71,
    /// FENCED_LEADER_EPOCH.
    FencedLeaderEpoch = 74,
    /// UNKNOWN_LEADER_EPOCH.
    UnknownLeaderEpoch = 75,
    /// MEMBER_ID_REQUIRED.
    MemberIdRequired = 79,
    /// GROUP_MAX_SIZE_REACHED.
    GroupMaxSizeReached = 81,
    /// PREFERRED_LEADER_NOT_AVAILABLE.
    PreferredLeaderNotAvailable = 80,
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE.
    EligibleLeadersNotAvailable = 83,
    /// ELECTION_NOT_NEEDED.
    ElectionNotNeeded = 84,
    /// FENCED_INSTANCE_ID.
    FencedInstanceId = 82,
    /// FENCED_MEMBER_EPOCH.
    FencedMemberEpoch = 110,
    /// UNRELEASED_INSTANCE_ID.
    UnreleasedInstanceId = 111,
    /// STALE_MEMBER_EPOCH.
    StaleMemberEpoch = 113,
    /// SASL_AUTHENTICATION_FAILED.
    SaslAuthenticationFailed = 58,
    /// INVALID_RECORD.
    InvalidRecord = 87,
    /// GROUP_SUBSCRIBED_TO_TOPIC.
    GroupSubscribedToTopic = 86,
    /// PRODUCER_FENCED.
    ProducerFenced = 90,
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    TransactionalIdAuthorizationFailed = 53,
    /// TRANSACTIONAL_ID_NOT_FOUND.
    TransactionalIdNotFound = 105,
    /// UNKNOWN_TOPIC_ID.
    UnknownTopicId = 100,
    /// INVALID_REGULAR_EXPRESSION.
    InvalidRegularExpression = 128,
}

impl Code {
    /// The wire value.
    pub fn value(self) -> i16 {
        self as i16
    }
}

impl From<Code> for i16 {
    fn from(code: Code) -> i16 {
        code.value()
    }
}
