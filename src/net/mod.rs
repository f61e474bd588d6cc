//! Broker connections: one task per socket, a pool per broker and workload.
//!
//! Workloads get separate connections (as franz-go does) so that a long fetch
//! poll never delays a heartbeat or a produce. Connections are secured as
//! `security.protocol` says: TLS (module `tls`, feature `tls`) and SASL
//! ([`sasl`]) run during connection setup, before a caller sees the
//! connection.
//!
//! Internal: hidden from the documentation unless the `internals` feature is
//! on, with no stability promise. The types a user needs are re-exported by
//! [`crate::config`] (security settings) and [`crate::cluster`] (workloads,
//! broker addresses, connections).

mod connection;
pub(crate) mod metrics;
mod pool;
pub mod sasl;
mod security;
#[cfg(feature = "tls")]
pub mod tls;

pub use connection::{BrokerAddr, Connection, ConnectionConfig, PendingResponse};
pub use metrics::ConnectionStats;
pub use pool::{ConnectionPool, Workload};
#[cfg(feature = "internals")]
pub use sasl::{SaslConfig, SaslMechanism, Secret};
pub use security::{SecurityConfig, SecurityProtocol, TlsConfig};
