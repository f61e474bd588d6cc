//! The shape most Kafka requests and responses share: a list of topics,
//! each with a list of partitions, answered topic by topic and partition
//! by partition (<https://kafka.apache.org/protocol#protocol_messages>).

use kafka_protocol::messages::TopicName;

/// Answers every partition of every topic of a request: `split` takes a
/// request topic apart into its name and partitions, `answer` answers one
/// partition of the named topic, `join` builds the response topic.
pub(super) fn per_partition<T, P, R, O>(
    topics: Vec<T>,
    split: impl Fn(T) -> (TopicName, Vec<P>),
    mut answer: impl FnMut(&str, P) -> R,
    join: impl Fn(TopicName, Vec<R>) -> O,
) -> Vec<O> {
    topics
        .into_iter()
        .map(|t| {
            let (name, partitions) = split(t);
            let answers = partitions
                .into_iter()
                .map(|p| answer(name.0.as_str(), p))
                .collect();
            join(name, answers)
        })
        .collect()
}
