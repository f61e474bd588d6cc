//! The (topic, partition) pair every layer above `cluster` routes by.

use std::fmt;
use std::sync::Arc;

/// One partition of one topic.
///
/// The topic name is shared (`Arc<str>`), so copies made per record batch or
/// per fetch are cheap.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    /// Formats as Kafka's tools do: `topic-3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
