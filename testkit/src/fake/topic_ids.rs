//! Topics addressed by id (KIP-516): Fetch v13+ and Produce v13 carry a
//! topic id instead of a name. The fake names such topics on arrival, so
//! fault rules, sessions and logs keep working by name; an id no topic has
//! (never created, or deleted) keeps an empty name and its partitions get
//! `UNKNOWN_TOPIC_ID`, as on a Kafka 4 broker.

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

use super::state::ClusterState;
use super::wire::FakeRequest;

impl ClusterState {
    /// The name of the topic with id `id`, if one exists.
    pub fn topic_name(&self, id: &uuid::Uuid) -> Option<&str> {
        if id.is_nil() {
            return None;
        }
        self.topics
            .iter()
            .find(|(_, t)| t.id == *id)
            .map(|(name, _)| name.as_str())
    }

    /// The id of topic `name` (nil when there is none).
    pub fn topic_id(&self, name: &str) -> uuid::Uuid {
        self.topics.get(name).map_or(uuid::Uuid::nil(), |t| t.id)
    }

    /// Fills in the names of topics a request addresses by id (Fetch v13+,
    /// Produce v13). A request that names its topics is left as it is.
    pub fn name_topics(&self, request: &mut FakeRequest) {
        let name = |id: &uuid::Uuid| {
            TopicName(StrBytes::from_string(
                self.topic_name(id).unwrap_or_default().to_owned(),
            ))
        };
        match request {
            FakeRequest::Fetch(r) => {
                for t in r.topics.iter_mut().filter(|t| t.topic.0.is_empty()) {
                    t.topic = name(&t.topic_id);
                }
                for t in r
                    .forgotten_topics_data
                    .iter_mut()
                    .filter(|t| t.topic.0.is_empty())
                {
                    t.topic = name(&t.topic_id);
                }
            }
            FakeRequest::Produce(r) => {
                for t in r.topic_data.iter_mut().filter(|t| t.name.0.is_empty()) {
                    t.name = name(&t.topic_id);
                }
            }
            _ => {}
        }
    }
}
