//! A thin driver for [`StreamsMemberState`]: sends each heartbeat to the
//! group coordinator on the [`Workload::Group`] connection and feeds the
//! answer back. The caller decides when to heartbeat (every
//! [`StreamsGroupMember::heartbeat_interval`], and at once after
//! [`StreamsGroupMember::revoke_done`]); each call is bounded by
//! `request.timeout.ms` and the coordinator lookup by
//! `default.api.timeout.ms`.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use kafka_protocol::messages::StreamsGroupHeartbeatRequest;

use super::member::{StreamsMemberState, StreamsTopology, TaskAssignment, TaskChange, TaskId};
use crate::cluster::{Cluster, CoordinatorKind};
use crate::error::Result;
use crate::net::Workload;
use crate::protocol::versions::Versions;

const HEARTBEAT_VERSIONS: Versions = Versions::new(0, 1);

/// A random id for a member (KIP-1071: the client generates it and keeps it
/// for its lifetime): 32 hex digits.
pub(super) fn new_member_id() -> String {
    let mut out = String::with_capacity(32);
    for i in 0..2u8 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u8(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// One member of a streams group (`group.protocol=streams`).
#[derive(Debug)]
pub struct StreamsGroupMember {
    cluster: Cluster,
    group_id: String,
    state: StreamsMemberState,
}

impl StreamsGroupMember {
    /// A member of `group_id` for the application instance `process_id`,
    /// not yet joined: the first [`heartbeat`](Self::heartbeat) joins with
    /// `topology`.
    pub fn new(
        cluster: Cluster,
        group_id: &str,
        process_id: &str,
        rebalance_timeout: Duration,
        topology: StreamsTopology,
    ) -> StreamsGroupMember {
        StreamsGroupMember {
            cluster,
            group_id: group_id.to_owned(),
            state: StreamsMemberState::new(
                group_id,
                &new_member_id(),
                process_id,
                None,
                rebalance_timeout,
                topology,
            ),
        }
    }

    /// The protocol state (member id, epoch, statuses, ...).
    pub fn state(&self) -> &StreamsMemberState {
        &self.state
    }

    /// The tasks owned now.
    pub fn tasks(&self) -> &TaskAssignment {
        self.state.owned()
    }

    /// How long to wait between heartbeats, as the coordinator asked.
    pub fn heartbeat_interval(&self) -> Duration {
        self.state.heartbeat_interval()
    }

    /// The application closed the tasks of the last
    /// [`TaskChange::Revoke`]; heartbeat at once after this.
    pub fn revoke_done(&mut self) -> Vec<TaskChange> {
        self.state.revoke_done()
    }

    /// Sends one heartbeat now and applies the answer. After a retriable
    /// error (coordinator moved, connection lost) the coordinator is looked
    /// up again on the next call.
    pub async fn heartbeat(&mut self) -> Result<Vec<TaskChange>> {
        let req = self.state.heartbeat_request();
        let answer = self.send(&req).await;
        let out = self.state.on_heartbeat(answer);
        if let Err(e) = &out {
            if e.is_retriable() {
                self.cluster
                    .invalidate_coordinator(CoordinatorKind::Group, &self.group_id);
            }
        }
        out
    }

    /// Leaves the group (epoch -1); returns the active tasks that were
    /// owned, for the caller to close.
    pub async fn leave(&mut self) -> Result<BTreeSet<TaskId>> {
        let owned = self.state.leave();
        let req = self.state.heartbeat_request();
        let answer = self.send(&req).await;
        self.state.on_heartbeat(answer)?;
        Ok(owned)
    }

    async fn send(
        &self,
        req: &StreamsGroupHeartbeatRequest,
    ) -> Result<kafka_protocol::messages::StreamsGroupHeartbeatResponse> {
        let addr = self
            .cluster
            .coordinator(CoordinatorKind::Group, &self.group_id)
            .await?;
        let conn = self.cluster.connection(&addr, Workload::Group).await?;
        let version = conn.version_for::<StreamsGroupHeartbeatRequest>(HEARTBEAT_VERSIONS)?;
        conn.send_at(req, version).await
    }
}
