//! Configs of topics and brokers: DescribeConfigs (KIP-4, synonyms from
//! KIP-226) and IncrementalAlterConfigs (KIP-339), which changes only the
//! keys named instead of replacing the whole set as AlterConfigs did.
//!
//! Topic configs and cluster-wide broker defaults go to the controller (any
//! broker forwards in KRaft); one broker's configs go to that broker, which
//! is the only one that can report its static settings.

use std::collections::BTreeMap;
use std::fmt;

use indexmap::IndexMap;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};

use super::{check, missing, str_bytes, Admin, PerResource};
use crate::error::Result;
use crate::net::{BrokerAddr, Workload};
use crate::protocol::versions::Versions;

const DESCRIBE_CONFIGS_VERSIONS: Versions = Versions::new(1, 4);
const INCREMENTAL_ALTER_VERSIONS: Versions = Versions::new(0, 1);

/// A resource that has configs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ConfigResource {
    /// A topic.
    Topic(String),
    /// One broker by node id.
    Broker(i32),
    /// The cluster-wide dynamic default for every broker.
    BrokerDefault,
    /// A consumer or share group's configs (KIP-848, KIP-932), e.g.
    /// `share.auto.offset.reset` or `consumer.session.timeout.ms`.
    Group(String),
}

impl ConfigResource {
    fn wire(&self) -> (i8, String) {
        match self {
            ConfigResource::Topic(t) => (2, t.clone()),
            ConfigResource::Broker(id) => (4, id.to_string()),
            ConfigResource::BrokerDefault => (4, String::new()),
            ConfigResource::Group(g) => (32, g.clone()),
        }
    }
}

impl fmt::Display for ConfigResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigResource::Topic(t) => write!(f, "topic {t}"),
            ConfigResource::Broker(id) => write!(f, "broker {id}"),
            ConfigResource::BrokerDefault => write!(f, "broker default"),
            ConfigResource::Group(g) => write!(f, "group {g}"),
        }
    }
}

/// Where a config value comes from (DescribeConfigs `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigSource {
    /// Set on the topic.
    DynamicTopic,
    /// Set dynamically on this broker.
    DynamicBroker,
    /// Set dynamically as the default for all brokers.
    DynamicDefaultBroker,
    /// From the broker's properties file.
    StaticBroker,
    /// Kafka's built-in default.
    Default,
    /// A dynamic broker logger level.
    DynamicBrokerLogger,
    /// A client-metrics subscription.
    ClientMetrics,
    /// Set on a group.
    Group,
    /// Not known to this client.
    Unknown,
}

impl ConfigSource {
    fn from_wire(v: i8) -> ConfigSource {
        match v {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            7 => ConfigSource::ClientMetrics,
            8 => ConfigSource::Group,
            _ => ConfigSource::Unknown,
        }
    }

    /// Kafka's name for the source, as `kafka-configs.sh` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ConfigSource::DynamicTopic => "DYNAMIC_TOPIC_CONFIG",
            ConfigSource::DynamicBroker => "DYNAMIC_BROKER_CONFIG",
            ConfigSource::DynamicDefaultBroker => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            ConfigSource::StaticBroker => "STATIC_BROKER_CONFIG",
            ConfigSource::Default => "DEFAULT_CONFIG",
            ConfigSource::DynamicBrokerLogger => "DYNAMIC_BROKER_LOGGER_CONFIG",
            ConfigSource::ClientMetrics => "CLIENT_METRICS_CONFIG",
            ConfigSource::Group => "GROUP_CONFIG",
            ConfigSource::Unknown => "UNKNOWN",
        }
    }
}

/// One config key of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Key.
    pub name: String,
    /// Value; `None` for sensitive or unset values.
    pub value: Option<String>,
    /// Where the value comes from.
    pub source: ConfigSource,
    /// Whether it cannot be changed.
    pub read_only: bool,
    /// Whether the value is a secret (never returned).
    pub sensitive: bool,
}

/// One change of IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlterConfigOp {
    /// Sets `key` to `value`.
    Set(String, String),
    /// Removes the override of `key` (back to its default).
    Delete(String),
    /// Appends `value` to a list-valued `key`.
    Append(String, String),
    /// Removes `value` from a list-valued `key`.
    Subtract(String, String),
}

impl AlterConfigOp {
    fn wire(&self) -> AlterableConfig {
        let (name, op, value) = match self {
            AlterConfigOp::Set(k, v) => (k, 0, Some(v)),
            AlterConfigOp::Delete(k) => (k, 1, None),
            AlterConfigOp::Append(k, v) => (k, 2, Some(v)),
            AlterConfigOp::Subtract(k, v) => (k, 3, Some(v)),
        };
        AlterableConfig::default()
            .with_name(str_bytes(name))
            .with_config_operation(op)
            .with_value(value.map(|v| str_bytes(v)))
    }
}

/// Orders destinations: `None` (the controller) first, then by broker.
type DestinationKey = Option<(String, u16, i32)>;
/// One request's worth of resources and where it goes (`None`: controller).
type Batch<'a, T> = (Option<BrokerAddr>, Vec<&'a (ConfigResource, T)>);

impl Admin {
    /// The broker a config request for `r` must reach: the broker itself
    /// for broker configs, else the controller (`None`).
    fn config_destination(&self, r: &ConfigResource) -> Result<Option<BrokerAddr>> {
        match r {
            ConfigResource::Broker(id) => self.cluster.broker(*id).map(Some),
            _ => Ok(None),
        }
    }

    /// Groups resources by destination; an unknown broker id fails just
    /// that resource.
    fn by_destination<'a, T>(
        &self,
        items: &'a [(ConfigResource, T)],
        out: &mut PerResource<ConfigResource, impl Sized>,
    ) -> BTreeMap<DestinationKey, Batch<'a, T>> {
        let mut groups: BTreeMap<_, (Option<BrokerAddr>, Vec<_>)> = BTreeMap::new();
        for item in items {
            match self.config_destination(&item.0) {
                Err(e) => {
                    out.insert(item.0.clone(), Err(e));
                }
                Ok(dest) => {
                    let key = dest
                        .as_ref()
                        .map(|a| (a.host.clone(), a.port, a.id.unwrap_or(-1)));
                    groups.entry(key).or_insert((dest, Vec::new())).1.push(item);
                }
            }
        }
        groups
    }

    /// Describes configs, one result per resource: every key, or only
    /// `keys` when not empty.
    pub async fn describe_configs(
        &self,
        resources: &[ConfigResource],
        keys: &[String],
    ) -> Result<PerResource<ConfigResource, Vec<ConfigEntry>>> {
        let items: Vec<(ConfigResource, ())> = resources.iter().map(|r| (r.clone(), ())).collect();
        let mut out: PerResource<ConfigResource, Vec<ConfigEntry>> = IndexMap::new();
        for r in resources {
            out.insert(r.clone(), Err(missing("DescribeConfigs", &r.to_string())));
        }
        let groups = self.by_destination(&items, &mut out);
        for (_, (dest, batch)) in groups {
            let req = DescribeConfigsRequest::default().with_resources(
                batch
                    .iter()
                    .map(|(r, ())| {
                        let (ty, name) = r.wire();
                        DescribeConfigsResource::default()
                            .with_resource_type(ty)
                            .with_resource_name(str_bytes(&name))
                            .with_configuration_keys(
                                (!keys.is_empty())
                                    .then(|| keys.iter().map(|k| str_bytes(k)).collect()),
                            )
                    })
                    .collect(),
            );
            let resp = match &dest {
                Some(addr) => {
                    self.cluster
                        .send(addr, Workload::Admin, &req, DESCRIBE_CONFIGS_VERSIONS)
                        .await
                }
                None => self.send_controller(&req, DESCRIBE_CONFIGS_VERSIONS).await,
            };
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    for (r, ()) in batch {
                        out.insert(r.clone(), Err(e.clone()));
                    }
                    continue;
                }
            };
            for (r, ()) in batch {
                let (ty, name) = r.wire();
                let found = resp
                    .results
                    .iter()
                    .find(|x| x.resource_type == ty && x.resource_name.as_str() == name);
                let res = match found {
                    None => Err(missing("DescribeConfigs", &r.to_string())),
                    Some(x) => check(
                        x.error_code,
                        x.error_message.as_ref(),
                        "DescribeConfigs",
                        &r.to_string(),
                    )
                    .map(|()| {
                        let mut entries: Vec<ConfigEntry> = x
                            .configs
                            .iter()
                            .map(|c| ConfigEntry {
                                name: c.name.as_str().to_owned(),
                                value: c.value.as_ref().map(|v| v.as_str().to_owned()),
                                source: ConfigSource::from_wire(c.config_source),
                                read_only: c.read_only,
                                sensitive: c.is_sensitive,
                            })
                            .collect();
                        entries.sort_by(|a, b| a.name.cmp(&b.name));
                        entries
                    }),
                };
                out.insert(r.clone(), res);
            }
        }
        Ok(out)
    }

    /// Changes configs key by key (KIP-339); one result per resource.
    pub async fn incremental_alter_configs(
        &self,
        changes: &[(ConfigResource, Vec<AlterConfigOp>)],
        validate_only: bool,
    ) -> Result<PerResource<ConfigResource, ()>> {
        let mut out: PerResource<ConfigResource, ()> = IndexMap::new();
        for (r, _) in changes {
            out.insert(
                r.clone(),
                Err(missing("IncrementalAlterConfigs", &r.to_string())),
            );
        }
        let groups = self.by_destination(changes, &mut out);
        for (_, (dest, batch)) in groups {
            let req = IncrementalAlterConfigsRequest::default()
                .with_validate_only(validate_only)
                .with_resources(
                    batch
                        .iter()
                        .map(|(r, ops)| {
                            let (ty, name) = r.wire();
                            AlterConfigsResource::default()
                                .with_resource_type(ty)
                                .with_resource_name(str_bytes(&name))
                                .with_configs(ops.iter().map(AlterConfigOp::wire).collect())
                        })
                        .collect(),
                );
            let resp = match &dest {
                Some(addr) => {
                    self.cluster
                        .send(addr, Workload::Admin, &req, INCREMENTAL_ALTER_VERSIONS)
                        .await
                }
                None => self.send_controller(&req, INCREMENTAL_ALTER_VERSIONS).await,
            };
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    for (r, _) in batch {
                        out.insert(r.clone(), Err(e.clone()));
                    }
                    continue;
                }
            };
            for (r, _) in batch {
                let (ty, name) = r.wire();
                let res = match resp
                    .responses
                    .iter()
                    .find(|x| x.resource_type == ty && x.resource_name.as_str() == name)
                {
                    None => Err(missing("IncrementalAlterConfigs", &r.to_string())),
                    Some(x) => check(
                        x.error_code,
                        x.error_message.as_ref(),
                        "IncrementalAlterConfigs",
                        &r.to_string(),
                    ),
                };
                out.insert(r.clone(), res);
            }
        }
        Ok(out)
    }
}
