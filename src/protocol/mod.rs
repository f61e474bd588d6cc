//! The Kafka wire protocol, with no I/O: framing, version negotiation, the
//! record batch v2 codec and its compression codecs.
//!
//! Nothing here touches a socket, a clock or a runtime. Every function works
//! on `bytes` buffers so that it can be unit-tested, property-tested and
//! fuzzed without a broker. Message schemas come from the `kafka-protocol`
//! crate; see <https://kafka.apache.org/protocol> for the wire format.

pub mod compression;
pub mod consumer_protocol;
#[cfg(feature = "internals")]
pub mod frame;
#[cfg(not(feature = "internals"))]
pub(crate) mod frame;
pub mod otlp;
pub mod records;
pub mod versions;

mod error;

pub use error::ProtocolError;
/// The name of an API key (`Produce`, `Fetch`, ...), for messages.
pub use frame::api_name;
