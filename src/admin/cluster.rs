//! The cluster as a whole: DescribeCluster (KIP-700: brokers, controller,
//! cluster id, with fenced brokers on v2, KIP-1073) and the feature levels
//! the brokers advertise in ApiVersions (KIP-584; Kafka has no separate
//! DescribeFeatures API: the Java client reads the same response).

use kafka_protocol::messages::{ApiVersionsRequest, DescribeClusterRequest};

use super::{check, str_bytes, Admin};
use crate::error::Result;
use crate::protocol::versions::Versions;

const DESCRIBE_CLUSTER_VERSIONS: Versions = Versions::new(0, 2);
const API_VERSIONS_VERSIONS: Versions = Versions::new(3, 4);

/// A broker as DescribeCluster reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerDescription {
    /// Node id.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
    /// Whether the controller has fenced it (DescribeCluster v2+).
    pub fenced: bool,
}

/// The cluster's identity and membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// Cluster id.
    pub cluster_id: String,
    /// The controller's node id as brokers report it (-1 if unknown).
    pub controller_id: i32,
    /// Brokers, sorted by id.
    pub brokers: Vec<BrokerDescription>,
}

/// One feature's level range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// Feature name (`metadata.version`, `transaction.version`, ...).
    pub name: String,
    /// Lowest level.
    pub min: i16,
    /// Highest level.
    pub max: i16,
}

/// Feature levels: finalized for the cluster, and supported by the broker
/// that answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    /// Finalized levels (what the cluster runs at), sorted by name.
    pub finalized: Vec<Feature>,
    /// Epoch of the finalized set (-1 if unknown).
    pub finalized_epoch: i64,
    /// Levels the answering broker supports, sorted by name.
    pub supported: Vec<Feature>,
}

impl Admin {
    /// Describes the cluster (any broker answers).
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let req = DescribeClusterRequest::default().with_include_fenced_brokers(true);
        let resp = self.send_any(&req, DESCRIBE_CLUSTER_VERSIONS).await?;
        check(
            resp.error_code,
            resp.error_message.as_ref(),
            "DescribeCluster",
            "cluster",
        )?;
        let mut brokers: Vec<BrokerDescription> = resp
            .brokers
            .iter()
            .map(|b| BrokerDescription {
                id: b.broker_id.0,
                host: b.host.as_str().to_owned(),
                port: b.port,
                rack: b.rack.as_ref().map(|r| r.as_str().to_owned()),
                fenced: b.is_fenced,
            })
            .collect();
        brokers.sort_by_key(|b| b.id);
        Ok(ClusterDescription {
            cluster_id: resp.cluster_id.as_str().to_owned(),
            controller_id: resp.controller_id.0,
            brokers,
        })
    }

    /// The cluster's feature levels, from ApiVersions.
    pub async fn features(&self) -> Result<Features> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(str_bytes("purekafka"))
            .with_client_software_version(str_bytes(env!("CARGO_PKG_VERSION")));
        let resp = self.send_any(&req, API_VERSIONS_VERSIONS).await?;
        check(resp.error_code, None, "ApiVersions", "features")?;
        let mut finalized: Vec<Feature> = resp
            .finalized_features
            .iter()
            .map(|f| Feature {
                name: f.name.as_str().to_owned(),
                min: f.min_version_level,
                max: f.max_version_level,
            })
            .collect();
        finalized.sort_by(|a, b| a.name.cmp(&b.name));
        let mut supported: Vec<Feature> = resp
            .supported_features
            .iter()
            .map(|f| Feature {
                name: f.name.as_str().to_owned(),
                min: f.min_version,
                max: f.max_version,
            })
            .collect();
        supported.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Features {
            finalized,
            finalized_epoch: resp.finalized_features_epoch,
            supported,
        })
    }
}
