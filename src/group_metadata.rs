//! Values a consumer group hands to its clients: committed offsets and the
//! group metadata a transactional producer sends with `TxnOffsetCommit` so
//! the coordinator fences zombies (KIP-447,
//! <https://cwiki.apache.org/confluence/display/KAFKA/KIP-447%3A+Producer+scalability+for+exactly+once+semantics>).
//!
//! Plain data at the bottom of the layers: the consumer produces these, the
//! producer and admin client take them, and none of them imports another.

use std::collections::BTreeSet;

use crate::TopicPartition;

/// An offset to commit, or one read back from the group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OffsetAndMetadata {
    /// The next offset to consume.
    pub offset: i64,
    /// The leader epoch of the last consumed record (KIP-320), if known.
    pub leader_epoch: Option<i32>,
    /// Free-form metadata stored with the offset.
    pub metadata: String,
}

impl OffsetAndMetadata {
    /// `offset` with no leader epoch and empty metadata.
    pub fn new(offset: i64) -> OffsetAndMetadata {
        OffsetAndMetadata {
            offset,
            leader_epoch: None,
            metadata: String::new(),
        }
    }
}

/// Who this member is in its group right now: what a transactional producer
/// sends with `TxnOffsetCommit` so the coordinator can fence zombies (KIP-447).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: String,
    /// Classic: the generation id; KIP-848: the member epoch. -1 when not in
    /// the group.
    pub generation_id: i32,
    /// The member id the coordinator knows us by (empty before joining).
    pub member_id: String,
    /// `group.instance.id` for static members.
    pub group_instance_id: Option<String>,
}

/// What a group member last published: who it is (for `TxnOffsetCommit`)
/// and the partitions it owns at that generation or epoch. A transactional
/// producer watches it to resend offsets refused with STALE_MEMBER_EPOCH: a
/// KIP-848 or KIP-1071 member's epoch moves with any heartbeat answer, and
/// the coordinator checks the epoch of a `TxnOffsetCommit` exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublishedMembership {
    /// The member's identity now.
    pub metadata: ConsumerGroupMetadata,
    /// The partitions it owns at `metadata.generation_id`.
    pub owned: BTreeSet<TopicPartition>,
}
