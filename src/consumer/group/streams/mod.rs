//! The streams group protocol (KIP-1071): a Kafka Streams-style application
//! joins a *streams group* through StreamsGroupHeartbeat (API 88), sending
//! its topology (subtopologies with their source, repartition and changelog
//! topics), and the group coordinator assigns it tasks (a subtopology id and
//! the partitions of its input topics: active, standby and warm-up tasks)
//! and creates the internal (changelog and repartition) topics.
//! Brokers from Kafka 4.2 serve it by default (`streams.version` 1,
//! `group.coordinator.rebalance.protocols` includes `streams`).
//! See <https://cwiki.apache.org/confluence/display/KAFKA/KIP-1071%3A+Streams+Rebalance+Protocol>.
//!
//! [`StreamsMemberState`] is the member's protocol as a pure state machine;
//! [`StreamsGroupMember`] drives it by hand against the coordinator, and
//! [`Consumer::subscribe_streams`](crate::consumer::Consumer::subscribe_streams)
//! runs it inside the consumer (`driver`), which the streams runtime uses
//! under `group.protocol=streams`.

mod client;
mod driver;
mod member;
mod subscribe;
#[cfg(test)]
mod wire_tests;

pub use client::StreamsGroupMember;
pub(crate) use driver::check_coordinator;
pub use member::{
    StreamsMemberState, StreamsTopology, Subtopology, TaskAssignment, TaskChange, TaskId,
    LEAVE_EPOCH, LEAVE_STATIC_EPOCH,
};
