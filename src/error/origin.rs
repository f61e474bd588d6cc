//! What an error concerns: a broker (its node id and address, as far as
//! they are known), several brokers, or a part of this client.

use std::fmt;

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
