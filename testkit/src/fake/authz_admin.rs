//! ACL checks of the transaction, config and admin APIs (KIP-11), with the
//! operations Kafka's request handlers ask for
//! (<https://kafka.apache.org/documentation/#operations_resources_and_protocols>):
//! AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn WRITE on
//! the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE
//! on each topic added (TOPIC_AUTHORIZATION_FAILED, the others
//! OPERATION_NOT_ATTEMPTED: nothing is added), READ on the group whose
//! offsets join the transaction and on each committed topic;
//! DescribeConfigs DESCRIBE_CONFIGS and IncrementalAlterConfigs
//! ALTER_CONFIGS on each resource (a topic's on the topic, a group's on the
//! group, a broker's on the cluster); CreatePartitions ALTER and
//! DeleteRecords DELETE on each topic; DeleteGroups DELETE on each group;
//! OffsetDelete DELETE on the group, then READ on each topic;
//! OffsetForLeaderEpoch DESCRIBE and DescribeProducers READ on each topic;
//! DescribeTransactions DESCRIBE on each transactional id, and
//! ListTransactions lists only those. A request is trimmed to what the
//! principal may touch; the refused parts are answered with the code.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse as ProducersPartition, TopicResponse as ProducersTopic,
};
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::authz::{
    Checked, ALTER, ALTER_CONFIGS, CLUSTER, CLUSTER_NAME, DELETE, DESCRIBE, DESCRIBE_CONFIGS,
    GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE,
};
use super::errors::Code;
use super::wire::{FakeRequest, FakeResponse};

// Config resource types on the wire (Kafka's `ConfigResource.Type`).
const CONFIG_TOPIC: i8 = 2;
const CONFIG_BROKER: i8 = 4;
const CONFIG_BROKER_LOGGER: i8 = 8;
const CONFIG_GROUP: i8 = 32;

/// The check a config resource of `resource_type` needs for `operation`:
/// the ACL resource to ask about and the code of a refusal.
fn config_acl(resource_type: i8, name: &str) -> Option<(i8, String, Code)> {
    match resource_type {
        CONFIG_TOPIC => Some((TOPIC, name.to_owned(), Code::TopicAuthorizationFailed)),
        CONFIG_GROUP => Some((GROUP, name.to_owned(), Code::GroupAuthorizationFailed)),
        CONFIG_BROKER | CONFIG_BROKER_LOGGER => Some((
            CLUSTER,
            CLUSTER_NAME.to_owned(),
            Code::ClusterAuthorizationFailed,
        )),
        _ => None,
    }
}

fn refused_message(what: &str, operation: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(format!(
        "{what}: not authorized ({operation})"
    )))
}

/// Checks the transaction, config and admin APIs; `None` for the others.
/// `may(operation, resource_type, name)` is the authorizer's decision for
/// the request's principal.
pub fn authorize_admin(
    may: &dyn Fn(i8, i8, &str) -> bool,
    request: &mut FakeRequest,
) -> Option<Checked> {
    let txn_denied = |id: &TransactionalId| !may(WRITE, TRANSACTIONAL_ID, id.0.as_str());
    Some(match request {
        FakeRequest::AddPartitionsToTxn(r) => {
            // Versions 0-3 (what the fake serves): one transaction.
            let whole = txn_denied(&r.v3_and_below_transactional_id)
                .then_some(Code::TransactionalIdAuthorizationFailed);
            let denied_topic = |t: &str| !may(WRITE, TOPIC, t);
            if whole.is_none()
                && !r
                    .v3_and_below_topics
                    .iter()
                    .any(|t| denied_topic(t.name.0.as_str()))
            {
                return Some(Checked::Serve(None));
            }
            let results = r
                .v3_and_below_topics
                .iter()
                .map(|t| {
                    let code = whole.unwrap_or(if denied_topic(t.name.0.as_str()) {
                        Code::TopicAuthorizationFailed
                    } else {
                        Code::OperationNotAttempted
                    });
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_partition_error_code(code.value())
                                })
                                .collect(),
                        )
                })
                .collect();
            Checked::Refuse(FakeResponse::AddPartitionsToTxn(
                AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results),
            ))
        }
        FakeRequest::AddOffsetsToTxn(r) => {
            let code = if txn_denied(&r.transactional_id) {
                Code::TransactionalIdAuthorizationFailed
            } else if !may(READ, GROUP, r.group_id.0.as_str()) {
                Code::GroupAuthorizationFailed
            } else {
                return Some(Checked::Serve(None));
            };
            Checked::Refuse(FakeResponse::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(code.value()),
            ))
        }
        FakeRequest::EndTxn(r) if txn_denied(&r.transactional_id) => {
            Checked::Refuse(FakeResponse::EndTxn(
                EndTxnResponse::default()
                    .with_error_code(Code::TransactionalIdAuthorizationFailed.value())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            ))
        }
        FakeRequest::TxnOffsetCommit(r) => {
            let whole = if txn_denied(&r.transactional_id) {
                Some(Code::TransactionalIdAuthorizationFailed)
            } else if !may(READ, GROUP, r.group_id.0.as_str()) {
                Some(Code::GroupAuthorizationFailed)
            } else {
                None
            };
            let denied = match whole {
                Some(_) => std::mem::take(&mut r.topics),
                None => take(&mut r.topics, |t| !may(READ, TOPIC, t.name.0.as_str())),
            };
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let code = whole.unwrap_or(Code::TopicAuthorizationFailed).value();
            let topics = denied
                .into_iter()
                .map(|t| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect();
            part(
                FakeResponse::TxnOffsetCommit(
                    TxnOffsetCommitResponse::default().with_topics(topics),
                ),
                r.topics.is_empty(),
            )
        }
        FakeRequest::DescribeConfigs(r) => {
            let denied = take(&mut r.resources, |c| {
                config_acl(c.resource_type, c.resource_name.as_str())
                    .is_some_and(|(rtype, name, _)| !may(DESCRIBE_CONFIGS, rtype, &name))
            });
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let results = denied
                .into_iter()
                .map(|c| {
                    let code = config_acl(c.resource_type, c.resource_name.as_str())
                        .map_or(Code::InvalidRequest, |(_, _, code)| code);
                    DescribeConfigsResult::default()
                        .with_error_code(code.value())
                        .with_error_message(refused_message(
                            c.resource_name.as_str(),
                            "DESCRIBE_CONFIGS",
                        ))
                        .with_resource_type(c.resource_type)
                        .with_resource_name(c.resource_name)
                })
                .collect();
            part(
                FakeResponse::DescribeConfigs(
                    DescribeConfigsResponse::default().with_results(results),
                ),
                r.resources.is_empty(),
            )
        }
        FakeRequest::IncrementalAlterConfigs(r) => {
            let denied = take(&mut r.resources, |c| {
                config_acl(c.resource_type, c.resource_name.as_str())
                    .is_some_and(|(rtype, name, _)| !may(ALTER_CONFIGS, rtype, &name))
            });
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let responses = denied
                .into_iter()
                .map(|c| {
                    let code = config_acl(c.resource_type, c.resource_name.as_str())
                        .map_or(Code::InvalidRequest, |(_, _, code)| code);
                    AlterConfigsResourceResponse::default()
                        .with_error_code(code.value())
                        .with_error_message(refused_message(
                            c.resource_name.as_str(),
                            "ALTER_CONFIGS",
                        ))
                        .with_resource_type(c.resource_type)
                        .with_resource_name(c.resource_name)
                })
                .collect();
            part(
                FakeResponse::IncrementalAlterConfigs(
                    IncrementalAlterConfigsResponse::default().with_responses(responses),
                ),
                r.resources.is_empty(),
            )
        }
        FakeRequest::CreatePartitions(r) => {
            let denied = take(&mut r.topics, |t| !may(ALTER, TOPIC, t.name.0.as_str()));
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let results = denied
                .into_iter()
                .map(|t| {
                    CreatePartitionsTopicResult::default()
                        .with_error_code(Code::TopicAuthorizationFailed.value())
                        .with_error_message(refused_message(t.name.0.as_str(), "ALTER"))
                        .with_name(t.name)
                })
                .collect();
            part(
                FakeResponse::CreatePartitions(
                    CreatePartitionsResponse::default().with_results(results),
                ),
                r.topics.is_empty(),
            )
        }
        FakeRequest::DeleteRecords(r) => {
            let denied = take(&mut r.topics, |t| !may(DELETE, TOPIC, t.name.0.as_str()));
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let topics = denied
                .into_iter()
                .map(|t| {
                    DeleteRecordsTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    DeleteRecordsPartitionResult::default()
                                        .with_partition_index(p.partition_index)
                                        .with_low_watermark(-1)
                                        .with_error_code(Code::TopicAuthorizationFailed.value())
                                })
                                .collect(),
                        )
                })
                .collect();
            part(
                FakeResponse::DeleteRecords(DeleteRecordsResponse::default().with_topics(topics)),
                r.topics.is_empty(),
            )
        }
        FakeRequest::DeleteGroups(r) => {
            let denied = take(&mut r.groups_names, |g| !may(DELETE, GROUP, g.0.as_str()));
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let results = denied
                .into_iter()
                .map(|g| {
                    DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(Code::GroupAuthorizationFailed.value())
                })
                .collect();
            part(
                FakeResponse::DeleteGroups(DeleteGroupsResponse::default().with_results(results)),
                r.groups_names.is_empty(),
            )
        }
        FakeRequest::OffsetDelete(r) => {
            if !may(DELETE, GROUP, r.group_id.0.as_str()) {
                return Some(Checked::Refuse(FakeResponse::OffsetDelete(
                    OffsetDeleteResponse::default()
                        .with_error_code(Code::GroupAuthorizationFailed.value()),
                )));
            }
            let denied = take(&mut r.topics, |t| !may(READ, TOPIC, t.name.0.as_str()));
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let topics = denied
                .into_iter()
                .map(|t| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(Code::TopicAuthorizationFailed.value())
                                })
                                .collect(),
                        )
                })
                .collect();
            part(
                FakeResponse::OffsetDelete(OffsetDeleteResponse::default().with_topics(topics)),
                r.topics.is_empty(),
            )
        }
        FakeRequest::OffsetForLeaderEpoch(r) => {
            let denied = take(&mut r.topics, |t| !may(DESCRIBE, TOPIC, t.topic.0.as_str()));
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let topics = denied
                .into_iter()
                .map(|t| {
                    OffsetForLeaderTopicResult::default()
                        .with_topic(t.topic)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    EpochEndOffset::default()
                                        .with_partition(p.partition)
                                        .with_error_code(Code::TopicAuthorizationFailed.value())
                                        .with_leader_epoch(-1)
                                        .with_end_offset(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            part(
                FakeResponse::OffsetForLeaderEpoch(
                    OffsetForLeaderEpochResponse::default().with_topics(topics),
                ),
                r.topics.is_empty(),
            )
        }
        FakeRequest::DescribeProducers(r) => {
            let denied = take(&mut r.topics, |t| !may(READ, TOPIC, t.name.0.as_str()));
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let topics = denied
                .into_iter()
                .map(|t| {
                    ProducersTopic::default().with_name(t.name).with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|p| {
                                ProducersPartition::default()
                                    .with_partition_index(*p)
                                    .with_error_code(Code::TopicAuthorizationFailed.value())
                            })
                            .collect(),
                    )
                })
                .collect();
            part(
                FakeResponse::DescribeProducers(
                    DescribeProducersResponse::default().with_topics(topics),
                ),
                r.topics.is_empty(),
            )
        }
        FakeRequest::DescribeTransactions(r) => {
            let denied = take(&mut r.transactional_ids, |id| {
                !may(DESCRIBE, TRANSACTIONAL_ID, id.0.as_str())
            });
            if denied.is_empty() {
                return Some(Checked::Serve(None));
            }
            let states = denied
                .into_iter()
                .map(|id| {
                    TransactionState::default()
                        .with_transactional_id(id)
                        .with_error_code(Code::TransactionalIdAuthorizationFailed.value())
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1)
                        .with_transaction_timeout_ms(-1)
                        .with_transaction_start_time_ms(-1)
                })
                .collect();
            part(
                FakeResponse::DescribeTransactions(
                    DescribeTransactionsResponse::default().with_transaction_states(states),
                ),
                r.transactional_ids.is_empty(),
            )
        }
        _ => return None,
    })
}

/// Takes out of a served ListTransactions answer the transactions `may`
/// does not allow to DESCRIBE.
pub fn filter_transactions(may: &dyn Fn(i8, i8, &str) -> bool, response: &mut FakeResponse) {
    if let FakeResponse::ListTransactions(r) = response {
        r.transaction_states
            .retain(|t| may(DESCRIBE, TRANSACTIONAL_ID, t.transactional_id.0.as_str()));
    }
}

/// Moves the items `denied` picks out of `items`.
pub fn take<T>(items: &mut Vec<T>, denied: impl Fn(&T) -> bool) -> Vec<T> {
    let (out, keep): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(|t| denied(t));
    *items = keep;
    out
}

/// `answer` holds the refused parts: the whole answer when nothing is
/// left to serve, else added to the served rest.
fn part(answer: FakeResponse, nothing_left: bool) -> Checked {
    if nothing_left {
        Checked::Refuse(answer)
    } else {
        Checked::Serve(Some(answer))
    }
}

/// Adds `extra` (the refused parts) to the served `response` of the same
/// API; false when the API is not one of this module's.
pub fn merge_admin(response: &mut FakeResponse, extra: FakeResponse) -> bool {
    match (response, extra) {
        (FakeResponse::TxnOffsetCommit(r), FakeResponse::TxnOffsetCommit(e)) => {
            r.topics.extend(e.topics)
        }
        (FakeResponse::DescribeConfigs(r), FakeResponse::DescribeConfigs(e)) => {
            r.results.extend(e.results)
        }
        (FakeResponse::IncrementalAlterConfigs(r), FakeResponse::IncrementalAlterConfigs(e)) => {
            r.responses.extend(e.responses)
        }
        (FakeResponse::CreatePartitions(r), FakeResponse::CreatePartitions(e)) => {
            r.results.extend(e.results)
        }
        (FakeResponse::DeleteRecords(r), FakeResponse::DeleteRecords(e)) => {
            r.topics.extend(e.topics)
        }
        (FakeResponse::DeleteGroups(r), FakeResponse::DeleteGroups(e)) => {
            r.results.extend(e.results)
        }
        (FakeResponse::OffsetDelete(r), FakeResponse::OffsetDelete(e)) => r.topics.extend(e.topics),
        (FakeResponse::OffsetForLeaderEpoch(r), FakeResponse::OffsetForLeaderEpoch(e)) => {
            r.topics.extend(e.topics)
        }
        (FakeResponse::DescribeProducers(r), FakeResponse::DescribeProducers(e)) => {
            r.topics.extend(e.topics)
        }
        (FakeResponse::DescribeTransactions(r), FakeResponse::DescribeTransactions(e)) => {
            r.transaction_states.extend(e.transaction_states)
        }
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::list_transactions_response::TransactionState as Listed;
    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };

    /// The principal may WRITE (so DESCRIBE) topic `t` and transactional
    /// id `tx`, and nothing else.
    fn may(op: i8, rtype: i8, name: &str) -> bool {
        matches!(
            (op, rtype, name),
            (WRITE | DESCRIBE, TOPIC, "t") | (WRITE | DESCRIBE, TRANSACTIONAL_ID, "tx")
        )
    }

    fn topic(name: &'static str) -> TopicName {
        TopicName(StrBytes::from_static_str(name))
    }

    fn add_partitions(id: &'static str, topics: &[&'static str]) -> FakeRequest {
        FakeRequest::AddPartitionsToTxn(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str(id)))
                .with_v3_and_below_topics(
                    topics
                        .iter()
                        .map(|t| {
                            AddPartitionsToTxnTopic::default()
                                .with_name(topic(t))
                                .with_partitions(vec![0, 1])
                        })
                        .collect(),
                ),
        )
    }

    /// Per topic, the codes of its partitions in a refused AddPartitionsToTxn.
    fn codes(checked: Option<Checked>) -> Vec<(String, Vec<i16>)> {
        let Some(Checked::Refuse(FakeResponse::AddPartitionsToTxn(r))) = checked else {
            panic!("not refused: {checked:?}");
        };
        r.results_by_topic_v3_and_below
            .iter()
            .map(|t| {
                let codes = t.results_by_partition.iter();
                let codes = codes.map(|p| p.partition_error_code).collect();
                (t.name.0.to_string(), codes)
            })
            .collect()
    }

    #[test]
    fn add_partitions_to_txn_adds_nothing_when_the_id_or_a_topic_is_refused() {
        let mut allowed = add_partitions("tx", &["t"]);
        assert!(matches!(
            authorize_admin(&may, &mut allowed),
            Some(Checked::Serve(None))
        ));
        let (not_attempted, topic_refused, id_refused) = (
            Code::OperationNotAttempted.value(),
            Code::TopicAuthorizationFailed.value(),
            Code::TransactionalIdAuthorizationFailed.value(),
        );
        assert_eq!(
            codes(authorize_admin(
                &may,
                &mut add_partitions("tx", &["t", "u"])
            )),
            [
                ("t".to_string(), vec![not_attempted; 2]),
                ("u".to_string(), vec![topic_refused; 2])
            ]
        );
        assert_eq!(
            codes(authorize_admin(&may, &mut add_partitions("other", &["t"]))),
            [("t".to_string(), vec![id_refused; 2])]
        );
    }

    #[test]
    fn per_topic_apis_serve_the_allowed_topics_and_refuse_the_rest() {
        let epoch_topic = |name| {
            OffsetForLeaderTopic::default()
                .with_topic(topic(name))
                .with_partitions(vec![OffsetForLeaderPartition::default().with_partition(0)])
        };
        let mut request = FakeRequest::OffsetForLeaderEpoch(
            OffsetForLeaderEpochRequest::default()
                .with_topics(vec![epoch_topic("t"), epoch_topic("u")]),
        );
        let Some(Checked::Serve(Some(FakeResponse::OffsetForLeaderEpoch(extra)))) =
            authorize_admin(&may, &mut request)
        else {
            panic!("not trimmed");
        };
        let FakeRequest::OffsetForLeaderEpoch(served) = &request else {
            unreachable!()
        };
        assert_eq!(served.topics.len(), 1);
        assert_eq!(served.topics[0].topic, topic("t"));
        assert_eq!(extra.topics[0].topic, topic("u"));
        assert_eq!(
            extra.topics[0].partitions[0].error_code,
            Code::TopicAuthorizationFailed.value()
        );

        // DescribeProducers needs READ, which WRITE does not imply.
        let mut producers = FakeRequest::DescribeProducers(
            DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
                .with_name(topic("t"))
                .with_partition_indexes(vec![0])]),
        );
        let Some(Checked::Refuse(FakeResponse::DescribeProducers(r))) =
            authorize_admin(&may, &mut producers)
        else {
            panic!("not refused");
        };
        assert_eq!(
            r.topics[0].partitions[0].error_code,
            Code::TopicAuthorizationFailed.value()
        );
    }

    #[test]
    fn transactions_are_described_and_listed_only_with_describe_on_their_id() {
        let id = |s: &'static str| TransactionalId(StrBytes::from_static_str(s));
        let mut described = FakeRequest::DescribeTransactions(
            DescribeTransactionsRequest::default().with_transactional_ids(vec![id("tx"), id("x")]),
        );
        let Some(Checked::Serve(Some(FakeResponse::DescribeTransactions(extra)))) =
            authorize_admin(&may, &mut described)
        else {
            panic!("not trimmed");
        };
        assert_eq!(extra.transaction_states[0].transactional_id, id("x"));
        assert_eq!(
            extra.transaction_states[0].error_code,
            Code::TransactionalIdAuthorizationFailed.value()
        );
        let mut listed = FakeResponse::ListTransactions(
            ListTransactionsResponse::default().with_transaction_states(vec![
                Listed::default().with_transactional_id(id("tx")),
                Listed::default().with_transactional_id(id("x")),
            ]),
        );
        filter_transactions(&may, &mut listed);
        let FakeResponse::ListTransactions(listed) = listed else {
            unreachable!()
        };
        let ids: Vec<_> = listed
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.clone())
            .collect();
        assert_eq!(ids, [id("tx")]);
    }
}
