//! DescribeConfigs and IncrementalAlterConfigs (KIP-339) for topics, a
//! read-only view of broker configs, and DescribeCluster (KIP-700).
//!
//! Topic configs are stored as given; only `max.message.bytes` changes the
//! fake's behaviour. Unknown topic config names are refused with
//! INVALID_CONFIG, as Kafka does; broker configs cannot be altered here.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;
use super::state::{ClusterState, DEFAULT_MAX_MESSAGE_BYTES};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Config sources (DescribeConfigs v1+).
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;

/// Topic configs the fake knows, with Kafka's defaults.
fn topic_defaults() -> [(&'static str, String); 9] {
    [
        ("cleanup.policy", "delete".into()),
        ("compression.type", "producer".into()),
        ("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES.to_string()),
        ("message.timestamp.type", "CreateTime".into()),
        ("min.insync.replicas", "1".into()),
        ("retention.bytes", "-1".into()),
        ("retention.ms", "604800000".into()),
        ("segment.bytes", "1073741824".into()),
        ("segment.ms", "604800000".into()),
    ]
}

fn entry(name: &str, value: String, source: i8) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(name.to_owned()))
        .with_value(Some(StrBytes::from_string(value)))
        .with_config_source(source)
        .with_read_only(source == STATIC_BROKER_CONFIG)
}

impl ClusterState {
    pub(super) fn describe_configs(
        &self,
        broker: i32,
        req: DescribeConfigsRequest,
    ) -> DescribeConfigsResponse {
        let results = req
            .resources
            .into_iter()
            .map(|r| {
                let result = DescribeConfigsResult::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone());
                let wanted = |name: &str| {
                    r.configuration_keys
                        .as_ref()
                        .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
                };
                let entries: Result<Vec<_>, (Code, String)> = match r.resource_type {
                    TOPIC => match self.topics.get(r.resource_name.as_str()) {
                        None => Err((
                            Code::UnknownTopicOrPartition,
                            format!("topic {} does not exist", r.resource_name),
                        )),
                        Some(t) => Ok(topic_defaults()
                            .into_iter()
                            .map(|(name, default)| match t.configs.get(name) {
                                Some(v) => entry(name, v.clone(), DYNAMIC_TOPIC_CONFIG),
                                None => entry(name, default, DEFAULT_CONFIG),
                            })
                            .filter(|e| wanted(e.name.as_str()))
                            .collect()),
                    },
                    BROKER
                        if r.resource_name.as_str() == broker.to_string()
                            || r.resource_name.is_empty() =>
                    {
                        Ok([
                            ("broker.id", broker.to_string()),
                            ("log.dirs", "in-memory".to_owned()),
                            ("num.partitions", self.config.default_partitions.to_string()),
                            (
                                "auto.create.topics.enable",
                                self.config.auto_create_topics.to_string(),
                            ),
                        ]
                        .into_iter()
                        .map(|(n, v)| entry(n, v, STATIC_BROKER_CONFIG))
                        .filter(|e| wanted(e.name.as_str()))
                        .collect())
                    }
                    BROKER => Err((
                        Code::InvalidRequest,
                        format!("broker {broker} cannot describe broker {}", r.resource_name),
                    )),
                    other => Err((
                        Code::InvalidRequest,
                        format!("resource type {other} is not served"),
                    )),
                };
                match entries {
                    Ok(configs) => result.with_configs(configs),
                    Err((code, msg)) => result
                        .with_error_code(code.value())
                        .with_error_message(Some(StrBytes::from_string(msg))),
                }
            })
            .collect();
        DescribeConfigsResponse::default().with_results(results)
    }

    pub(super) fn incremental_alter_configs(
        &mut self,
        req: IncrementalAlterConfigsRequest,
    ) -> IncrementalAlterConfigsResponse {
        let known: Vec<&'static str> = topic_defaults().iter().map(|(n, _)| *n).collect();
        let responses = req
            .resources
            .into_iter()
            .map(|r| {
                let response = AlterConfigsResourceResponse::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone());
                let outcome = if r.resource_type != TOPIC {
                    Err((
                        Code::InvalidRequest,
                        "the fake alters topic configs only".to_owned(),
                    ))
                } else if let Some(bad) =
                    r.configs.iter().find(|c| !known.contains(&c.name.as_str()))
                {
                    Err((
                        Code::InvalidConfig,
                        format!("unknown topic config {}", bad.name),
                    ))
                } else if let Some(bad) = r
                    .configs
                    .iter()
                    .find(|c| !(0..=1).contains(&c.config_operation))
                {
                    Err((
                        Code::InvalidConfig,
                        format!(
                            "operation {} on {} (list configs are not modelled)",
                            bad.config_operation, bad.name
                        ),
                    ))
                } else {
                    match self.topics.get_mut(r.resource_name.as_str()) {
                        None => Err((
                            Code::UnknownTopicOrPartition,
                            format!("topic {} does not exist", r.resource_name),
                        )),
                        Some(topic) => {
                            if !req.validate_only {
                                for c in &r.configs {
                                    match (c.config_operation, &c.value) {
                                        (0, Some(v)) => {
                                            topic.configs.insert(c.name.to_string(), v.to_string());
                                        }
                                        _ => {
                                            topic.configs.remove(c.name.as_str());
                                        }
                                    }
                                }
                            }
                            Ok(())
                        }
                    }
                };
                match outcome {
                    Ok(()) => response,
                    Err((code, msg)) => response
                        .with_error_code(code.value())
                        .with_error_message(Some(StrBytes::from_string(msg))),
                }
            })
            .collect();
        IncrementalAlterConfigsResponse::default().with_responses(responses)
    }

    pub(super) fn describe_cluster(&self) -> DescribeClusterResponse {
        let brokers = self
            .alive_brokers()
            .map(|b| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host.clone()))
                    .with_port(i32::from(b.port))
            })
            .collect();
        let controller = self.alive_brokers().next().map(|b| b.id).unwrap_or(-1);
        DescribeClusterResponse::default()
            .with_endpoint_type(1)
            .with_cluster_id(StrBytes::from_string(self.config.cluster_id.clone()))
            .with_controller_id(BrokerId(controller))
            .with_brokers(brokers)
    }
}
