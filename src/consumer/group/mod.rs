//! Consumer-group membership and committed offsets.
pub mod assignor;
pub mod config;
pub mod events;
pub mod subscription;
