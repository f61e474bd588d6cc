//! The consumer: fetching, positions and group membership.

pub mod group;
