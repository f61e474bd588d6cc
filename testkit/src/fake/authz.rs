//! ACL enforcement (KIP-11), decided as Kafka's `StandardAuthorizer`
//! (KIP-801) decides with `allow.everyone.if.no.acl.found=false`: a super
//! user may do anything; otherwise a matching DENY binding wins, and a
//! request needs a matching ALLOW binding for its operation (or ALL, or an
//! operation that implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE,
//! ALTER_CONFIGS implies DESCRIBE_CONFIGS). A binding matches a resource by
//! its literal name, the literal wildcard `*`, or a prefix; a principal by
//! name or `User:*`; a host by address or `*`.
//!
//! What is checked, per API, as Kafka's request handlers check it
//! (<https://kafka.apache.org/documentation/#operations_resources_and_protocols>):
//! Produce WRITE and Fetch READ on each topic, ListOffsets and Metadata
//! DESCRIBE (Metadata leaves unauthorized topics out of a list-all answer
//! and marks named ones), CreateTopics CREATE on the cluster or the topic,
//! DeleteTopics DELETE; group APIs READ on the group (FindCoordinator and
//! OffsetFetch DESCRIBE, OffsetCommit READ on the group and each topic),
//! DescribeGroups DESCRIBE, ListGroups lists what the principal may
//! describe; InitProducerId WRITE on its transactional id, or for an
//! idempotent producer IDEMPOTENT_WRITE on the cluster or WRITE on some
//! topic; the ACL APIs ALTER (create, delete) and DESCRIBE on the cluster.
//! The transaction, config and admin APIs are checked in `authz_admin.rs`.
//! ApiVersions, DescribeCluster and the SASL APIs need no ACL.

use std::collections::BTreeSet;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::*;

use super::acls::AclEntry;
use super::authz_admin::{authorize_admin, filter_transactions, merge_admin, take};
use super::control::error_response;
use super::errors::Code;
use super::state::ClusterState;
use super::wire::{FakeRequest, FakeResponse};

// Kafka's wire values: resource types, operations, permissions, patterns.
pub(super) const TOPIC: i8 = 2;
pub(super) const GROUP: i8 = 3;
pub(super) const CLUSTER: i8 = 4;
pub(super) const TRANSACTIONAL_ID: i8 = 5;
const ALL: i8 = 2;
pub(super) const READ: i8 = 3;
pub(super) const WRITE: i8 = 4;
const CREATE: i8 = 5;
pub(super) const DELETE: i8 = 6;
pub(super) const ALTER: i8 = 7;
pub(super) const DESCRIBE: i8 = 8;
pub(super) const DESCRIBE_CONFIGS: i8 = 10;
pub(super) const ALTER_CONFIGS: i8 = 11;
const IDEMPOTENT_WRITE: i8 = 12;
const DENY: i8 = 2;
const ALLOW: i8 = 3;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;

/// The cluster resource's one name.
pub(super) const CLUSTER_NAME: &str = "kafka-cluster";

/// The authorizer a fake cluster runs with (Kafka's
/// `authorizer.class.name=...StandardAuthorizer`): requests are checked
/// against the ACLs clients create with CreateAcls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizer {
    super_users: BTreeSet<String>,
}

impl Authorizer {
    /// An authorizer with no super user: nothing is allowed until ACLs
    /// allow it.
    pub fn new() -> Authorizer {
        Authorizer::default()
    }

    /// Adds a super user (Kafka's `super.users`), e.g. `User:admin`.
    pub fn super_user(mut self, principal: impl Into<String>) -> Authorizer {
        self.super_users.insert(principal.into());
        self
    }

    /// Whether `principal` connecting from `host` may do `operation` on the
    /// resource (`resource_type`, `name`) under `acls`.
    pub fn allows(
        &self,
        acls: &[AclEntry],
        (principal, host): (&str, &str),
        operation: i8,
        (resource_type, name): (i8, &str),
    ) -> bool {
        if self.super_users.contains(principal) {
            return true;
        }
        let mut allowed = false;
        for acl in acls.iter().filter(|a| {
            a.resource_type == resource_type
                && names(a, name)
                && (a.principal == principal || a.principal == "User:*")
                && (a.host == "*" || a.host == host)
        }) {
            match acl.permission {
                DENY if acl.operation == ALL || acl.operation == operation => return false,
                ALLOW if implies(acl.operation, operation) => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// Whether some topic allows `operation` to the principal (Kafka's
    /// `authorizeByResourceType`): an ALLOW binding for it that no DENY
    /// binding covers, and no DENY on every topic.
    fn allows_some_topic(&self, acls: &[AclEntry], who: (&str, &str), operation: i8) -> bool {
        if self.super_users.contains(who.0) {
            return true;
        }
        let applies = |a: &&AclEntry| {
            a.resource_type == TOPIC
                && (a.principal == who.0 || a.principal == "User:*")
                && (a.host == "*" || a.host == who.1)
        };
        let denies: Vec<&AclEntry> = acls
            .iter()
            .filter(applies)
            .filter(|a| a.permission == DENY && (a.operation == ALL || a.operation == operation))
            .collect();
        if denies
            .iter()
            .any(|d| d.pattern_type == LITERAL && d.resource_name == "*")
        {
            return false;
        }
        acls.iter()
            .filter(applies)
            .filter(|a| a.permission == ALLOW && implies(a.operation, operation))
            .any(|a| {
                !denies
                    .iter()
                    .any(|d| match (d.pattern_type, a.pattern_type) {
                        (LITERAL, LITERAL) => d.resource_name == a.resource_name,
                        (PREFIXED, _) => a.resource_name.starts_with(d.resource_name.as_str()),
                        _ => false,
                    })
            })
    }
}

/// Whether binding `acl` names resource `name`.
fn names(acl: &AclEntry, name: &str) -> bool {
    match acl.pattern_type {
        LITERAL => acl.resource_name == name || acl.resource_name == "*",
        PREFIXED => name.starts_with(acl.resource_name.as_str()),
        _ => false,
    }
}

/// Whether an ALLOW for `granted` allows `wanted`.
fn implies(granted: i8, wanted: i8) -> bool {
    granted == ALL
        || granted == wanted
        || (wanted == DESCRIBE && matches!(granted, READ | WRITE | DELETE | ALTER))
        || (wanted == DESCRIBE_CONFIGS && granted == ALTER_CONFIGS)
}

/// What authorization makes of a request.
#[derive(Debug)]
pub enum Checked {
    /// Serve it (possibly trimmed to what the principal may touch), then
    /// add these answers for the parts taken out.
    Serve(Option<FakeResponse>),
    /// Answer this instead, serving nothing.
    Refuse(FakeResponse),
}

impl ClusterState {
    /// Checks `request` from `who` (principal, host) against the ACLs when
    /// the cluster runs an authorizer; trims the parts it may not touch.
    pub fn authorize(&self, who: (&str, &str), request: &mut FakeRequest) -> Checked {
        let Some(authz) = &self.config.authorizer else {
            return Checked::Serve(None);
        };
        if let Some(refused) = self.refuse_whole(authz, who, request) {
            return refused;
        }
        let may = |op: i8, rtype: i8, name: &str| authz.allows(&self.acls, who, op, (rtype, name));
        if let Some(checked) = authorize_admin(&may, request) {
            return checked;
        }
        match request {
            FakeRequest::Produce(r) => {
                let denied = take(&mut r.topic_data, |t| !may(WRITE, TOPIC, t.name.0.as_str()));
                if denied.is_empty() {
                    return Checked::Serve(None);
                }
                let part = FakeRequest::Produce(r.clone().with_topic_data(denied));
                trimmed(&part, r.topic_data.is_empty())
            }
            FakeRequest::Fetch(r) => {
                let denied = take(&mut r.topics, |t| !may(READ, TOPIC, t.topic.0.as_str()));
                if denied.is_empty() {
                    return Checked::Serve(None);
                }
                let part = FakeRequest::Fetch(r.clone().with_topics(denied));
                trimmed(
                    &part,
                    r.topics.is_empty() && r.forgotten_topics_data.is_empty(),
                )
            }
            FakeRequest::ListOffsets(r) => {
                let denied = take(&mut r.topics, |t| !may(DESCRIBE, TOPIC, t.name.0.as_str()));
                if denied.is_empty() {
                    return Checked::Serve(None);
                }
                let part = FakeRequest::ListOffsets(r.clone().with_topics(denied));
                trimmed(&part, r.topics.is_empty())
            }
            FakeRequest::OffsetCommit(r) => {
                let denied = take(&mut r.topics, |t| !may(READ, TOPIC, t.name.0.as_str()));
                if denied.is_empty() {
                    return Checked::Serve(None);
                }
                let part = FakeRequest::OffsetCommit(r.clone().with_topics(denied));
                trimmed(&part, r.topics.is_empty())
            }
            FakeRequest::CreateTopics(r) => {
                let on_cluster = may(CREATE, CLUSTER, CLUSTER_NAME);
                let denied = take(&mut r.topics, |t| {
                    !on_cluster && !may(CREATE, TOPIC, t.name.0.as_str())
                });
                let results: Vec<CreatableTopicResult> = denied
                    .into_iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(Code::TopicAuthorizationFailed.value())
                            .with_num_partitions(-1)
                            .with_replication_factor(-1)
                    })
                    .collect();
                Checked::Serve((!results.is_empty()).then(|| {
                    FakeResponse::CreateTopics(CreateTopicsResponse::default().with_topics(results))
                }))
            }
            FakeRequest::DeleteTopics(r) => {
                let refused_result = |name: Option<TopicName>, id: uuid::Uuid| {
                    DeletableTopicResult::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_error_code(Code::TopicAuthorizationFailed.value())
                };
                let mut refused: Vec<DeletableTopicResult> =
                    take(&mut r.topic_names, |n| !may(DELETE, TOPIC, n.0.as_str()))
                        .into_iter()
                        .map(|n| refused_result(Some(n), uuid::Uuid::nil()))
                        .collect();
                let named =
                    |t: &kafka_protocol::messages::delete_topics_request::DeleteTopicState| {
                        t.name
                            .as_ref()
                            .map(|n| n.0.to_string())
                            .or_else(|| self.topic_name(&t.topic_id).map(str::to_owned))
                    };
                refused.extend(
                    take(&mut r.topics, |t| {
                        named(t).is_some_and(|n| !may(DELETE, TOPIC, &n))
                    })
                    .into_iter()
                    .map(|t| refused_result(t.name, t.topic_id)),
                );
                Checked::Serve((!refused.is_empty()).then(|| {
                    FakeResponse::DeleteTopics(
                        DeleteTopicsResponse::default().with_responses(refused),
                    )
                }))
            }
            _ => Checked::Serve(None),
        }
    }

    /// The answer to a request refused whole: group APIs without their
    /// group permission, producer ids without theirs, the ACL APIs without
    /// theirs on the cluster.
    fn refuse_whole(
        &self,
        authz: &Authorizer,
        who: (&str, &str),
        request: &FakeRequest,
    ) -> Option<Checked> {
        let may = |op: i8, rtype: i8, name: &str| authz.allows(&self.acls, who, op, (rtype, name));
        let cluster = |op: i8| may(op, CLUSTER, CLUSTER_NAME);
        let on_group = |op: i8, group: &str| {
            (!may(op, GROUP, group)).then_some(Code::GroupAuthorizationFailed)
        };
        let txn_id = |id: Option<&TransactionalId>| {
            id.filter(|t| !t.0.is_empty())
                .is_some_and(|t| !may(WRITE, TRANSACTIONAL_ID, t.0.as_str()))
        };
        let code = match request {
            FakeRequest::Produce(r) if txn_id(r.transactional_id.as_ref()) => {
                Some(Code::TransactionalIdAuthorizationFailed)
            }
            FakeRequest::OffsetCommit(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::OffsetFetch(r) => {
                let group = r
                    .groups
                    .first()
                    .map(|g| g.group_id.0.to_string())
                    .unwrap_or_else(|| r.group_id.0.to_string());
                on_group(DESCRIBE, &group)
            }
            FakeRequest::FindCoordinator(r) => {
                let keys: Vec<String> = if r.coordinator_keys.is_empty() {
                    vec![r.key.to_string()]
                } else {
                    r.coordinator_keys.iter().map(|k| k.to_string()).collect()
                };
                let (rtype, code) = if r.key_type == 1 {
                    (TRANSACTIONAL_ID, Code::TransactionalIdAuthorizationFailed)
                } else {
                    (GROUP, Code::GroupAuthorizationFailed)
                };
                (!keys.iter().all(|k| may(DESCRIBE, rtype, k))).then_some(code)
            }
            FakeRequest::JoinGroup(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::SyncGroup(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::Heartbeat(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::LeaveGroup(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::ConsumerGroupHeartbeat(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::StreamsGroupHeartbeat(r) => on_group(READ, r.group_id.0.as_str()),
            FakeRequest::InitProducerId(r) => match r.transactional_id.as_ref() {
                Some(id) if !id.0.is_empty() => {
                    txn_id(Some(id)).then_some(Code::TransactionalIdAuthorizationFailed)
                }
                _ => (!cluster(IDEMPOTENT_WRITE)
                    && !authz.allows_some_topic(&self.acls, who, WRITE))
                .then_some(Code::ClusterAuthorizationFailed),
            },
            FakeRequest::CreateAcls(r) if !cluster(ALTER) => {
                let results = r
                    .creations
                    .iter()
                    .map(|_| {
                        AclCreationResult::default()
                            .with_error_code(Code::ClusterAuthorizationFailed.value())
                    })
                    .collect();
                return Some(Checked::Refuse(FakeResponse::CreateAcls(
                    CreateAclsResponse::default().with_results(results),
                )));
            }
            FakeRequest::DeleteAcls(r) if !cluster(ALTER) => {
                let results = r
                    .filters
                    .iter()
                    .map(|_| {
                        DeleteAclsFilterResult::default()
                            .with_error_code(Code::ClusterAuthorizationFailed.value())
                    })
                    .collect();
                return Some(Checked::Refuse(FakeResponse::DeleteAcls(
                    DeleteAclsResponse::default().with_filter_results(results),
                )));
            }
            FakeRequest::DescribeAcls(_) if !cluster(DESCRIBE) => {
                return Some(Checked::Refuse(FakeResponse::DescribeAcls(
                    DescribeAclsResponse::default()
                        .with_error_code(Code::ClusterAuthorizationFailed.value()),
                )));
            }
            _ => None,
        }?;
        error_response(request, code.value()).map(Checked::Refuse)
    }

    /// Takes out of a served response what `who` may not see: Metadata
    /// topics it may not describe (left out of a list-all answer, marked
    /// TOPIC_AUTHORIZATION_FAILED when named), DescribeGroups groups
    /// (GROUP_AUTHORIZATION_FAILED), ListGroups groups, ListTransactions
    /// transactions.
    pub fn authorize_answer(
        &self,
        who: (&str, &str),
        request: &FakeRequest,
        response: &mut FakeResponse,
    ) {
        let Some(authz) = &self.config.authorizer else {
            return;
        };
        let may = |op: i8, rtype: i8, name: &str| authz.allows(&self.acls, who, op, (rtype, name));
        match (request, response) {
            (FakeRequest::Metadata(req), FakeResponse::Metadata(resp)) => {
                let listed = req.topics.is_none();
                resp.topics.retain_mut(|t| {
                    let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                    if name.is_empty() || may(DESCRIBE, TOPIC, &name) {
                        return true;
                    }
                    t.error_code = Code::TopicAuthorizationFailed.value();
                    t.partitions.clear();
                    t.topic_id = uuid::Uuid::nil();
                    !listed
                });
            }
            (FakeRequest::DescribeGroups(_), FakeResponse::DescribeGroups(resp)) => {
                for g in &mut resp.groups {
                    if !may(DESCRIBE, GROUP, g.group_id.0.as_str()) {
                        g.error_code = Code::GroupAuthorizationFailed.value();
                        g.members.clear();
                    }
                }
            }
            (FakeRequest::ListGroups(_), FakeResponse::ListGroups(resp))
                if !may(DESCRIBE, CLUSTER, CLUSTER_NAME) =>
            {
                resp.groups
                    .retain(|g| may(DESCRIBE, GROUP, g.group_id.0.as_str()));
            }
            (FakeRequest::ListTransactions(_), response) => filter_transactions(&may, response),
            _ => {}
        }
    }
}

/// After trimming: `part` holds what was taken out. A request left with
/// nothing is refused with `part`'s answer (TOPIC_AUTHORIZATION_FAILED for
/// every topic); otherwise the rest is served and that answer added.
fn trimmed(part: &FakeRequest, nothing_left: bool) -> Checked {
    let answer = error_response(part, Code::TopicAuthorizationFailed.value());
    match answer {
        Some(a) if nothing_left => Checked::Refuse(a),
        other => Checked::Serve(other),
    }
}

/// Adds `extra` (answers for the parts authorization took out) to the
/// served `response` of the same API.
pub fn merge(response: &mut FakeResponse, extra: FakeResponse) {
    match (response, extra) {
        (FakeResponse::Produce(r), FakeResponse::Produce(e)) => r.responses.extend(e.responses),
        (FakeResponse::Fetch(r), FakeResponse::Fetch(e)) => r.responses.extend(e.responses),
        (FakeResponse::ListOffsets(r), FakeResponse::ListOffsets(e)) => r.topics.extend(e.topics),
        (FakeResponse::OffsetCommit(r), FakeResponse::OffsetCommit(e)) => r.topics.extend(e.topics),
        (FakeResponse::CreateTopics(r), FakeResponse::CreateTopics(e)) => r.topics.extend(e.topics),
        (FakeResponse::DeleteTopics(r), FakeResponse::DeleteTopics(e)) => {
            r.responses.extend(e.responses)
        }
        (response, extra) => {
            merge_admin(response, extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::state::{BrokerInfo, StateConfig};
    use kafka_protocol::protocol::StrBytes;

    fn acl(rtype: i8, (name, pattern): (&str, i8), principal: &str, op: i8, perm: i8) -> AclEntry {
        AclEntry {
            resource_type: rtype,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    #[test]
    fn decisions_follow_the_standard_authorizer() {
        let authz = Authorizer::new().super_user("User:root");
        let alice = ("User:alice", "127.0.0.1");
        let acls = vec![
            acl(TOPIC, ("ord", PREFIXED), "User:alice", WRITE, ALLOW),
            acl(TOPIC, ("orders-secret", LITERAL), "User:alice", ALL, DENY),
            acl(TOPIC, ("*", LITERAL), "User:*", READ, ALLOW),
            acl(GROUP, ("g", LITERAL), "User:alice", ALTER_CONFIGS, ALLOW),
        ];
        let may = |who, op, name: &str| authz.allows(&acls, who, op, (TOPIC, name));
        assert!(may(alice, WRITE, "orders"), "prefixed allow");
        assert!(may(alice, DESCRIBE, "orders"), "WRITE implies DESCRIBE");
        assert!(!may(alice, DELETE, "orders"), "no DELETE binding");
        assert!(!may(alice, WRITE, "orders-secret"), "deny wins");
        assert!(!may(alice, READ, "orders-secret"), "DENY ALL covers READ");
        assert!(
            may(("User:bob", "10.0.0.1"), READ, "audit"),
            "wildcard name and principal"
        );
        assert!(
            !may(("User:bob", "10.0.0.1"), WRITE, "audit"),
            "no ACL: denied"
        );
        assert!(
            may(("User:root", "10.0.0.1"), DELETE, "orders-secret"),
            "super user"
        );
        assert!(
            authz.allows(&acls, alice, DESCRIBE_CONFIGS, (GROUP, "g")),
            "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
        );
        assert!(!authz.allows(&acls, alice, READ, (GROUP, "g")));
        assert!(authz.allows_some_topic(&acls, alice, WRITE));
        assert!(!authz.allows_some_topic(&acls, ("User:bob", "h"), WRITE));
        let denied_everywhere = vec![
            acl(TOPIC, ("t", LITERAL), "User:bob", WRITE, ALLOW),
            acl(TOPIC, ("*", LITERAL), "User:bob", WRITE, DENY),
        ];
        assert!(!authz.allows_some_topic(&denied_everywhere, ("User:bob", "h"), WRITE));
    }

    fn secured() -> ClusterState {
        let config = StateConfig {
            authorizer: Some(Authorizer::new()),
            ..StateConfig::default()
        };
        let broker = BrokerInfo {
            id: 0,
            host: "127.0.0.1".into(),
            port: 9000,
            alive: true,
        };
        let mut s = ClusterState::new(config, vec![broker]);
        s.create_topic("t", 1, 1).expect("topic");
        s.create_topic("u", 1, 1).expect("topic");
        s.acls
            .push(acl(TOPIC, ("t", LITERAL), "User:alice", READ, ALLOW));
        s
    }

    fn refused_code(checked: Checked) -> i16 {
        match checked {
            Checked::Refuse(FakeResponse::FindCoordinator(r)) => r.coordinators[0].error_code,
            Checked::Refuse(FakeResponse::InitProducerId(r)) => r.error_code,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn whole_requests_are_refused_with_kafkas_codes() {
        let s = secured();
        let who = ("User:alice", "127.0.0.1");
        let mut find = FakeRequest::FindCoordinator(
            FindCoordinatorRequest::default()
                .with_coordinator_keys(vec![StrBytes::from_static_str("g")]),
        );
        assert_eq!(
            refused_code(s.authorize(who, &mut find)),
            Code::GroupAuthorizationFailed.value()
        );
        let mut init = FakeRequest::InitProducerId(InitProducerIdRequest::default());
        assert_eq!(
            refused_code(s.authorize(who, &mut init)),
            Code::ClusterAuthorizationFailed.value()
        );
    }

    #[test]
    fn metadata_hides_or_marks_what_the_principal_may_not_describe() {
        let mut s = secured();
        let who = ("User:alice", "127.0.0.1");
        let mut answer = |req: MetadataRequest| {
            let mut resp = FakeResponse::Metadata(s.metadata(req.clone(), 12));
            s.authorize_answer(who, &FakeRequest::Metadata(req), &mut resp);
            let FakeResponse::Metadata(m) = resp else {
                panic!("metadata");
            };
            m.topics
                .iter()
                .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.error_code))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            answer(MetadataRequest::default().with_topics(None)),
            [(Some("t".to_string()), 0)]
        );
        let named = |n: &'static str| {
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str(n))))
        };
        let mut got =
            answer(MetadataRequest::default().with_topics(Some(vec![named("t"), named("u")])));
        got.sort();
        assert_eq!(
            got,
            [
                (Some("t".to_string()), 0),
                (
                    Some("u".to_string()),
                    Code::TopicAuthorizationFailed.value()
                )
            ]
        );
    }
}
