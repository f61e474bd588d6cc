//! The streams runtime: a topology of async processing stages run as one
//! member of a consumer group, with ordering modes, commit watermarks,
//! sync/async/exactly-once commits and failure policies.
//!
//! The problem it solves is Kafka KIP-311 / KAFKA-6989: a task processes its
//! records one at a time, so one slow call or one failing record stops the
//! world. Here each assigned partition is a task with a buffer, an in-flight
//! window and a [`CommitWatermark`] (only the contiguous done prefix is ever
//! committed); the [`OrderingMode`] decides what may run concurrently. The
//! target design is `architecture.md`, section "Streams runtime"; DESIGN.md
//! ("streams") describes what is built.
//!
//! - `watermark`, `scheduler`: the pure core, unit- and property-tested
//!   without I/O.
//! - `config`: ordering, limits, [`CommitMode`], [`FailurePolicy`].
//! - `topology`: the typed builder ([`Streams::topology`]), `serdes`, and
//!   `sink` ([`Sink`], [`Branched`]: sinks, partitioners, branches).
//! - `runtime`: the poll loop, dispatcher, workers, commits, rebalances.
//! - [`retry`]: the parallel retry lane and its dead-letter topic.
//! - [`state`] and `stateful`: state stores with changelogs and restore,
//!   and the aggregations on them ([`GroupedStream`], [`Table`]);
//!   `join`: tables read from topics ([`SourceTable`]) and stream-table
//!   joins; `repartition`: `group_by`'s repartition topics, the parts of
//!   a topology they join.

mod config;
mod error;
mod join;
mod metrics;
mod repartition;
pub mod retry;
mod runtime;
mod scheduler;
mod serdes;
mod session;
mod sink;
mod source_group;
pub mod state;
mod stateful;
mod topology;
mod watermark;
mod windowed;

pub use config::{
    Backoff, CommitCallback, CommitMode, CommitOutcome, DeadLetterGuard, FailurePolicy,
    GroupProtocol, RetryLane, StreamsConfig, StreamsConfigBuilder,
};
pub use error::{ProcessingError, StreamsError};
pub use join::SourceTable;
pub use metrics::{LatencyHistogram, PartitionMetrics, StreamsMetrics};
pub use repartition::repartition_topic;
pub use runtime::{RunningStreams, Streams};
pub use scheduler::{Flow, OrderingMode, TaskQueue};

/// The old name of [`OrderingMode`], which shadowed `std::cmp::Ordering`;
/// kept one release (see CHANGELOG.md), then removed.
#[deprecated(note = "renamed OrderingMode")]
pub type Ordering = OrderingMode;
#[cfg(feature = "serde")]
pub use serdes::JsonDeserializer;
pub use serdes::{BytesDeserializer, Deserializer, FnDeserializer, StringDeserializer};
pub use session::{SessionWindowedSerializer, SessionWindowedStream, SessionWindows};
pub use sink::{Branched, Sink};
pub use source_group::{delivery_count, SourceGroup};
pub use stateful::{GroupedStream, LongSerde, Table};
pub use topology::{Pipeline, ProcessResult, Processor, Record, Topology, TopologyBuilder};
pub use windowed::{TimeWindows, Windowed, WindowedSerializer, WindowedStream};

/// The old name of [`TopologyBuilder`], easy to confuse with
/// [`StreamsConfigBuilder`].
#[deprecated(note = "renamed TopologyBuilder")]
pub type StreamsBuilder = TopologyBuilder;
pub use watermark::CommitWatermark;
