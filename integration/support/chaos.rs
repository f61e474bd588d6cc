//! The fault driver for the 3-node cluster (`scripts/kafka up --nodes 3`):
//! finds the node that plays a role right now (a partition's leader, the
//! active KRaft controller, a group or transaction coordinator) and
//! SIGKILLs/restarts or SIGSTOPs/SIGCONTs it through `scripts/kafka`, or
//! faults the clients' traffic to it through a [`ClusterProxy`].
//!
//! Roles are resolved through the protocol, as a client sees them:
//! Metadata for leaders, DescribeQuorum (KIP-595, partition 0 of
//! `__cluster_metadata`) for the active controller, FindCoordinator (KIP-98)
//! for coordinators. The cluster runs combined broker+controller nodes, so a
//! controller's node id is also its broker id, and node N is
//! `scripts/kafka`'s node N.
//!
//! Every fault is undone by [`Chaos::heal`], and by `Drop`, so a failed
//! test leaves the cluster whole for the next one.

use std::fmt;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{DescribeQuorumRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use purekafka::cluster::CoordinatorKind;
use purekafka::cluster::Workload;
use purekafka::protocol::versions::Versions;
use purekafka::Cluster;

use super::proxy::{ClusterProxy, NetFault};

/// Which node to hit.
#[derive(Clone, Debug)]
pub enum Role {
    /// The leader of one partition.
    Leader { topic: String, partition: i32 },
    /// The active KRaft controller (the quorum leader).
    Controller,
    /// The coordinator of a consumer group.
    GroupCoordinator(String),
    /// The coordinator of a transactional id.
    TxnCoordinator(String),
    /// A node chosen by id.
    Node(i32),
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Leader { topic, partition } => write!(f, "leader of {topic}-{partition}"),
            Role::Controller => f.write_str("controller"),
            Role::GroupCoordinator(g) => write!(f, "group coordinator of {g}"),
            Role::TxnCoordinator(t) => write!(f, "txn coordinator of {t}"),
            Role::Node(n) => write!(f, "node {n}"),
        }
    }
}

/// What to do to the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL, undone by a restart.
    Kill,
    /// SIGSTOP, undone by SIGCONT.
    Pause,
    /// A network fault on the clients' traffic to the node, through the
    /// driver's [`ClusterProxy`]; undone by forwarding again.
    Net(NetFault),
}

/// One injected fault, for the run's log line.
#[derive(Clone, Debug)]
pub struct Injected {
    pub fault: Fault,
    pub role: String,
    pub node: i32,
}

/// The driver. Holds the nodes it has taken down until [`heal`](Self::heal).
pub struct Chaos {
    cluster: Cluster,
    proxy: Option<Arc<ClusterProxy>>,
    down: Mutex<Vec<(i32, Fault)>>,
    log: Mutex<Vec<Injected>>,
}

/// The script that runs the 3-node cluster: `PUREKAFKA_KAFKA_SCRIPT` when
/// set (a cluster started from another work tree keeps its node state
/// there, and only its own script can find the nodes), else this work
/// tree's `scripts/kafka`.
pub fn kafka_script() -> String {
    std::env::var("PUREKAFKA_KAFKA_SCRIPT")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka").to_owned())
}

/// Runs `scripts/kafka <action> <node> --nodes 3` (blocking).
pub fn node_command(action: &str, n: i32) -> Result<(), String> {
    let script = kafka_script();
    let out = Command::new("bash")
        .args([script.as_str(), action, &n.to_string(), "--nodes", "3"])
        .output()
        .map_err(|e| format!("scripts/kafka {action} {n}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "scripts/kafka {action} {n} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

async fn node_command_async(action: &'static str, n: i32) -> Result<(), String> {
    tokio::task::spawn_blocking(move || node_command(action, n))
        .await
        .map_err(|e| format!("scripts/kafka {action} {n}: {e}"))?
}

impl Chaos {
    /// A driver that resolves roles through `cluster` (a client of the
    /// 3-node cluster with a short request timeout).
    pub fn new(cluster: Cluster) -> Chaos {
        Chaos {
            cluster,
            proxy: None,
            down: Mutex::default(),
            log: Mutex::default(),
        }
    }

    /// A driver that can also apply [`Fault::Net`] through `proxy` (roles
    /// are still resolved through `cluster`, a direct client).
    pub fn with_proxy(cluster: Cluster, proxy: Arc<ClusterProxy>) -> Chaos {
        let mut chaos = Chaos::new(cluster);
        chaos.proxy = Some(proxy);
        chaos
    }

    /// The node that plays `role` now.
    pub async fn resolve(&self, role: &Role) -> Result<i32, String> {
        match role {
            Role::Node(n) => Ok(*n),
            Role::Leader { topic, partition } => {
                let m = self
                    .cluster
                    .refresh_metadata(Some(std::slice::from_ref(topic)))
                    .await
                    .map_err(|e| format!("metadata for {topic}: {e}"))?;
                let leader = m
                    .topics
                    .get(topic)
                    .and_then(|t| t.partitions.iter().find(|p| p.partition == *partition))
                    .map(|p| p.leader)
                    .unwrap_or(-1);
                if leader < 0 {
                    return Err(format!("{topic}-{partition} has no leader"));
                }
                Ok(leader)
            }
            Role::Controller => self.active_controller().await,
            Role::GroupCoordinator(g) => self.coordinator(CoordinatorKind::Group, g).await,
            Role::TxnCoordinator(t) => self.coordinator(CoordinatorKind::Transaction, t).await,
        }
    }

    /// [`resolve`](Self::resolve), asked again until `bound` has passed:
    /// on a loaded machine one lookup can time out (the driver's client has
    /// a short request timeout), and a fault that never fires proves nothing.
    pub async fn resolve_within(&self, role: &Role, bound: Duration) -> Result<i32, String> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match self.resolve(role).await {
                Ok(n) => return Ok(n),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("{role}: not resolved within {bound:?}: {e}"))
                }
                Err(e) => {
                    eprintln!("chaos: resolving {role}: {e}; asking again");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    }

    async fn coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<i32, String> {
        // Ask afresh: a cached answer may predate the last fault.
        self.cluster.invalidate_coordinator(kind, key);
        let addr = self
            .cluster
            .coordinator(kind, key)
            .await
            .map_err(|e| format!("FindCoordinator({kind:?} {key}): {e}"))?;
        addr.id
            .ok_or_else(|| format!("FindCoordinator({kind:?} {key}) gave no node id"))
    }

    /// The quorum leader from DescribeQuorum, which brokers forward to the
    /// controllers.
    pub async fn active_controller(&self) -> Result<i32, String> {
        let conn = self
            .cluster
            .any_connection(Workload::Admin)
            .await
            .map_err(|e| format!("DescribeQuorum: no connection: {e}"))?;
        let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let resp = conn
            .send(&req, Versions::new(0, 2))
            .await
            .map_err(|e| format!("DescribeQuorum: {e}"))?;
        if resp.error_code != 0 {
            return Err(format!("DescribeQuorum: error {}", resp.error_code));
        }
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or("DescribeQuorum: empty answer")?;
        if p.error_code != 0 || p.leader_id.0 < 0 {
            return Err(format!(
                "DescribeQuorum: error {} leader {}",
                p.error_code, p.leader_id.0
            ));
        }
        Ok(p.leader_id.0)
    }

    /// Resolves `role` and applies `fault` to its node. At most one node is
    /// down at a time (replication 3, min.insync.replicas 2): a second
    /// fault before [`heal`](Self::heal) is refused.
    pub async fn inject(&self, role: &Role, fault: Fault) -> Result<i32, String> {
        if !self.down.lock().unwrap().is_empty() {
            return Err("a node is already down; heal first".into());
        }
        let n = self.resolve_within(role, Duration::from_secs(15)).await?;
        // Recorded first: heal must undo even a half-applied fault.
        self.down.lock().unwrap().push((n, fault));
        match fault {
            Fault::Kill => node_command_async("kill", n).await?,
            Fault::Pause => node_command_async("pause", n).await?,
            Fault::Net(f) => self
                .proxy
                .as_ref()
                .ok_or("a network fault needs a driver with a proxy")?
                .inject(n, f)?,
        }
        self.log.lock().unwrap().push(Injected {
            fault,
            role: role.to_string(),
            node: n,
        });
        Ok(n)
    }

    /// Restarts killed nodes and resumes paused ones; waits until each
    /// restarted node serves.
    pub async fn heal(&self) -> Result<(), String> {
        let down: Vec<(i32, Fault)> = std::mem::take(&mut *self.down.lock().unwrap());
        for (n, fault) in down {
            match fault {
                Fault::Kill => node_command_async("start", n).await?,
                Fault::Pause => node_command_async("resume", n).await?,
                Fault::Net(_) => {
                    if let Some(p) = &self.proxy {
                        p.heal();
                    }
                }
            }
        }
        Ok(())
    }

    /// Injects, holds for `hold`, heals.
    pub async fn bounce(&self, role: &Role, fault: Fault, hold: Duration) -> Result<i32, String> {
        let n = self.inject(role, fault).await?;
        tokio::time::sleep(hold).await;
        self.heal().await?;
        Ok(n)
    }

    /// Frames the proxy relayed and dropped (`None` without a proxy).
    pub fn proxy_frames(&self) -> Option<(u64, u64)> {
        self.proxy.as_ref().map(|p| p.frames())
    }

    /// Every fault injected so far.
    pub fn injected(&self) -> Vec<Injected> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        let down = std::mem::take(&mut *self.down.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (n, fault) in down {
            let action = match fault {
                Fault::Kill => "start",
                Fault::Pause => "resume",
                // The proxy heals itself when dropped.
                Fault::Net(_) => continue,
            };
            if let Err(e) = node_command(action, n) {
                eprintln!("chaos: could not heal node {n}: {e}");
            }
        }
    }
}

/// One fault test at a time: each stops nodes the others depend on.
pub static FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
