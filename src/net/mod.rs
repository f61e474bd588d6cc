//! Broker connections: one task per socket, a pool per broker and workload.
//!
//! Workloads get separate connections (as franz-go does) so that a long fetch
//! poll never delays a heartbeat or a produce.

mod connection;
mod pool;

pub use connection::{BrokerAddr, Connection, ConnectionConfig, PendingResponse};
pub use pool::{ConnectionPool, Workload};
