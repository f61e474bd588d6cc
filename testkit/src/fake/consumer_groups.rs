//! Consumer groups of the KIP-848 protocol: ConsumerGroupHeartbeat with a
//! server-side uniform assignor that keeps partitions where they are when it
//! can, and the reconciliation of KIP-848: a member first gives up what its
//! new target takes away, and only then gets partitions the others have
//! released; its epoch reaches the group epoch once nothing is left to revoke.
//!
//! A member subscribes to topic names, a regular expression
//! (`subscribed_topic_regex`, matched against whole topic names and
//! re-resolved at each heartbeat, so new topics join the group's
//! subscription), or both; an invalid expression gets
//! INVALID_REGULAR_EXPRESSION. Simplifications, stated: no rack awareness,
//! and the member epoch must match exactly (Kafka also tolerates the
//! previous epoch in some cases).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::Code;

/// `group.consumer.session.timeout.ms` (Kafka's default).
pub const SESSION_TIMEOUT_MS: i64 = 45_000;
/// `group.consumer.heartbeat.interval.ms` answered to members (Kafka's
/// default is 5 s, and any value from 1 ms is a valid broker setting): a
/// KIP-848 member learns its new assignment at its next heartbeat, so the
/// fake answers 50 ms and a reassignment settles in a few hundred ms.
pub const HEARTBEAT_INTERVAL_MS: i32 = 50;

type Tp = (String, i32);

/// A member of a KIP-848 group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerMember {
    /// Member id.
    pub id: String,
    /// Static instance id.
    pub instance_id: Option<String>,
    /// Member epoch.
    pub epoch: i32,
    /// The topics it subscribes to: its names plus the topics its regex
    /// matches.
    pub subscribed: BTreeSet<String>,
    /// The topic names it sent.
    pub names: BTreeSet<String>,
    /// Its subscription regex, anchored to whole names.
    pub regex: Option<regex::Regex>,
    /// Partitions it owns now.
    pub assigned: BTreeSet<Tp>,
    /// Partitions it was told to give up and has not yet confirmed.
    pub revoking: BTreeSet<Tp>,
    /// A static member that left temporarily (epoch -2).
    pub away: bool,
    last_seen_ms: i64,
    sent: Option<BTreeSet<Tp>>,
}

impl ConsumerMember {
    /// Recomputes [`subscribed`](Self::subscribed) from the names and the
    /// regex over `topics`; true when it changed.
    fn resolve(&mut self, topics: &TopicView) -> bool {
        let mut subscribed = self.names.clone();
        if let Some(re) = &self.regex {
            subscribed.extend(topics.keys().filter(|t| re.is_match(t)).cloned());
        }
        let changed = subscribed != self.subscribed;
        self.subscribed = subscribed;
        changed
    }
}

/// A KIP-848 group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    /// Group epoch: bumped on every membership or subscription change.
    pub epoch: i32,
    /// Members by id.
    pub members: BTreeMap<String, ConsumerMember>,
    /// Target assignment of the current epoch.
    pub target: BTreeMap<String, BTreeSet<Tp>>,
}

/// Topic name -> (id, partition count), as the assignor sees the cluster.
pub type TopicView = BTreeMap<String, (uuid::Uuid, i32)>;

impl ConsumerGroup {
    /// One heartbeat.
    pub fn heartbeat(
        &mut self,
        req: &ConsumerGroupHeartbeatRequest,
        topics: &TopicView,
        fresh_id: String,
        now_ms: i64,
    ) -> ConsumerGroupHeartbeatResponse {
        let error = |code: Code| {
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code.value())
                .with_member_epoch(-1)
        };
        let member_id = if req.member_id.is_empty() {
            fresh_id
        } else {
            req.member_id.to_string()
        };
        // Validated before anything else, as Kafka validates the request.
        let regex = match req.subscribed_topic_regex.as_ref().map(|r| r.as_str()) {
            None => None,
            Some("") => Some(None),
            Some(r) => match regex::Regex::new(&format!("^(?:{r})$")) {
                Ok(re) => Some(Some(re)),
                Err(_) => return error(Code::InvalidRegularExpression),
            },
        };
        let instance = req.instance_id.as_ref().map(|i| i.to_string());
        let mut joined = false;
        match req.member_epoch {
            -1 | -2 => return self.leave(&member_id, req.member_epoch, now_ms),
            0 => match self.join(&member_id, instance, req, now_ms) {
                Ok(took_over) => joined = !took_over,
                Err(code) => return error(code),
            },
            e => {
                let Some(m) = self.members.get(&member_id) else {
                    return error(Code::UnknownMemberId);
                };
                if e != m.epoch {
                    return error(Code::FencedMemberEpoch);
                }
            }
        }
        let mut changed = false;
        if let Some(m) = self.members.get_mut(&member_id) {
            m.last_seen_ms = now_ms;
            if let Some(names) = &req.subscribed_topic_names {
                m.names = names.iter().map(|n| n.0.to_string()).collect();
            }
            if let Some(regex) = regex {
                m.regex = regex;
            }
            if let Some(owned) = &req.topic_partitions {
                let owned = resolve(owned, topics);
                m.revoking.retain(|tp| owned.contains(tp));
            }
        }
        for m in self.members.values_mut() {
            changed |= m.resolve(topics);
        }
        if changed || joined {
            self.bump(topics);
        } else {
            self.retarget_if_topics_changed(topics);
        }
        self.reconcile(&member_id, topics)
    }

    /// Adds a member; `Ok(true)` when a static member took over its old
    /// slot (no rebalance).
    fn join(
        &mut self,
        member_id: &str,
        instance: Option<String>,
        req: &ConsumerGroupHeartbeatRequest,
        now_ms: i64,
    ) -> Result<bool, Code> {
        if let Some(iid) = &instance {
            let prev = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(iid) && m.id != member_id)
                .map(|m| (m.id.clone(), m.away));
            if let Some((prev_id, away)) = prev {
                if !away {
                    return Err(Code::UnreleasedInstanceId);
                }
                // KIP-345 under KIP-848: the new incarnation takes over the
                // old one's assignment and epoch.
                if let Some(old) = self.members.remove(&prev_id) {
                    let taken = ConsumerMember {
                        id: member_id.to_string(),
                        away: false,
                        last_seen_ms: now_ms,
                        sent: None,
                        ..old
                    };
                    if let Some(t) = self.target.remove(&prev_id) {
                        self.target.insert(member_id.to_string(), t);
                    }
                    self.members.insert(member_id.to_string(), taken);
                    return Ok(true);
                }
            }
        }
        let names = req
            .subscribed_topic_names
            .iter()
            .flatten()
            .map(|n| n.0.to_string())
            .collect();
        self.members.insert(
            member_id.to_string(),
            ConsumerMember {
                id: member_id.to_string(),
                instance_id: instance,
                names,
                last_seen_ms: now_ms,
                ..ConsumerMember::default()
            },
        );
        Ok(false)
    }

    fn leave(
        &mut self,
        member_id: &str,
        epoch: i32,
        now_ms: i64,
    ) -> ConsumerGroupHeartbeatResponse {
        let response = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(member_id.to_string())))
            .with_member_epoch(epoch);
        match self.members.get_mut(member_id) {
            Some(m) if epoch == -2 && m.instance_id.is_some() => {
                m.away = true;
                m.last_seen_ms = now_ms;
            }
            Some(_) => {
                self.members.remove(member_id);
                self.target.remove(member_id);
                self.epoch += 1;
            }
            None => {}
        }
        response
    }

    /// Whether a member has been silent past the session timeout (what
    /// [`expire`](Self::expire) would drop).
    pub fn has_expired(&self, now_ms: i64) -> bool {
        self.members
            .values()
            .any(|m| now_ms - m.last_seen_ms > SESSION_TIMEOUT_MS)
    }

    /// Drops members silent past the session timeout; true if any.
    pub fn expire(&mut self, now_ms: i64, topics: &TopicView) -> bool {
        let before = self.members.len();
        self.members
            .retain(|_, m| now_ms - m.last_seen_ms <= SESSION_TIMEOUT_MS);
        let expired = self.members.len() != before;
        if expired {
            self.bump(topics);
        }
        expired
    }

    fn bump(&mut self, topics: &TopicView) {
        self.epoch += 1;
        self.target = self.assign(topics);
    }

    fn retarget_if_topics_changed(&mut self, topics: &TopicView) {
        let wanted: usize = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .collect::<BTreeSet<_>>()
            .iter()
            .filter_map(|t| topics.get(*t))
            .map(|(_, n)| usize::try_from(*n).unwrap_or(0))
            .sum();
        let targeted: usize = self.target.values().map(BTreeSet::len).sum();
        if wanted != targeted {
            self.bump(topics);
        }
    }

    /// Uniform and sticky: each member keeps what it has up to its quota,
    /// the rest goes to the members with the fewest partitions.
    fn assign(&self, topics: &TopicView) -> BTreeMap<String, BTreeSet<Tp>> {
        let mut target: BTreeMap<String, BTreeSet<Tp>> = self
            .members
            .keys()
            .map(|id| (id.clone(), BTreeSet::new()))
            .collect();
        let subscribed: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .collect();
        let all: Vec<Tp> = subscribed
            .iter()
            .filter_map(|t| topics.get(*t).map(|(_, n)| (*t, *n)))
            .flat_map(|(t, n)| (0..n).map(move |p| (t.clone(), p)))
            .collect();
        if self.members.is_empty() {
            return target;
        }
        let quota = all.len().div_ceil(self.members.len());
        let mut free = Vec::new();
        for tp in all {
            let keeper = self
                .members
                .values()
                .find(|m| {
                    m.subscribed.contains(&tp.0)
                        && (m.assigned.contains(&tp) || m.revoking.contains(&tp))
                })
                .map(|m| m.id.clone());
            match keeper {
                Some(id) if target.get(&id).is_some_and(|s| s.len() < quota) => {
                    if let Some(s) = target.get_mut(&id) {
                        s.insert(tp);
                    }
                }
                _ => free.push(tp),
            }
        }
        for tp in free {
            let to = self
                .members
                .values()
                .filter(|m| m.subscribed.contains(&tp.0))
                .min_by_key(|m| target.get(&m.id).map_or(0, BTreeSet::len))
                .map(|m| m.id.clone());
            if let Some(id) = to {
                if let Some(s) = target.get_mut(&id) {
                    s.insert(tp);
                }
            }
        }
        target
    }

    fn reconcile(&mut self, member_id: &str, topics: &TopicView) -> ConsumerGroupHeartbeatResponse {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let held_by_others: BTreeSet<Tp> = self
            .members
            .values()
            .filter(|m| m.id != member_id)
            .flat_map(|m| m.assigned.iter().chain(m.revoking.iter()).cloned())
            .collect();
        let group_epoch = self.epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return ConsumerGroupHeartbeatResponse::default()
                .with_error_code(Code::UnknownMemberId.value());
        };
        let revoke: BTreeSet<Tp> = m.assigned.difference(&target).cloned().collect();
        if !revoke.is_empty() {
            m.assigned.retain(|tp| target.contains(tp));
            m.revoking.extend(revoke);
        }
        if m.revoking.is_empty() {
            let gained: Vec<Tp> = target
                .iter()
                .filter(|tp| !m.assigned.contains(*tp) && !held_by_others.contains(*tp))
                .cloned()
                .collect();
            m.assigned.extend(gained);
            m.epoch = group_epoch;
        }
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| {
            m.sent = Some(m.assigned.clone());
            Assignment::default().with_topic_partitions(encode(&m.assigned, topics))
        });
        ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(member_id.to_string())))
            .with_member_epoch(m.epoch)
            .with_heartbeat_interval_ms(HEARTBEAT_INTERVAL_MS)
            .with_assignment(assignment)
    }

    /// Whether `member_id` at `epoch` may commit offsets.
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> Code {
        match self.members.get(member_id) {
            None if epoch < 0 && self.members.is_empty() => Code::None,
            None => Code::UnknownMemberId,
            Some(m) if epoch != m.epoch => Code::StaleMemberEpoch,
            Some(_) => Code::None,
        }
    }
}

fn resolve(
    owned: &[kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions],
    topics: &TopicView,
) -> BTreeSet<Tp> {
    owned
        .iter()
        .filter_map(|t| {
            topics
                .iter()
                .find(|(_, (id, _))| *id == t.topic_id)
                .map(|(name, _)| (name.clone(), t.partitions.clone()))
        })
        .flat_map(|(name, parts)| parts.into_iter().map(move |p| (name.clone(), p)))
        .collect()
}

fn encode(assigned: &BTreeSet<Tp>, topics: &TopicView) -> Vec<TopicPartitions> {
    let mut out: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in assigned {
        let Some((id, _)) = topics.get(topic) else {
            continue;
        };
        match out.iter_mut().find(|t| t.topic_id == *id) {
            Some(t) => t.partitions.push(*p),
            None => out.push(
                TopicPartitions::default()
                    .with_topic_id(*id)
                    .with_partitions(vec![*p]),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as Owned;
    use kafka_protocol::messages::TopicName;

    use super::*;

    fn view() -> TopicView {
        BTreeMap::from([("t".to_string(), (uuid::Uuid::from_u128(7), 4))])
    }

    fn beat(id: &str, epoch: i32, owned: Option<Vec<i32>>) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_member_id(StrBytes::from_string(id.into()))
            .with_member_epoch(epoch)
            .with_subscribed_topic_names(
                (epoch == 0).then(|| vec![TopicName(StrBytes::from_static_str("t"))]),
            )
            .with_topic_partitions(owned.map(|p| {
                vec![Owned::default()
                    .with_topic_id(uuid::Uuid::from_u128(7))
                    .with_partitions(p)]
            }))
    }

    fn parts(r: &ConsumerGroupHeartbeatResponse) -> Option<Vec<i32>> {
        r.assignment.as_ref().map(|a| {
            a.topic_partitions
                .iter()
                .flat_map(|t| t.partitions.clone())
                .collect()
        })
    }

    #[test]
    fn a_regex_subscription_follows_matching_topics() {
        let id = |n: u128| uuid::Uuid::from_u128(n);
        let mut topics: TopicView = BTreeMap::from([
            ("orders-eu".to_string(), (id(1), 2)),
            ("audit".to_string(), (id(2), 1)),
            ("xorders-eu".to_string(), (id(3), 1)),
        ]);
        let beat = |epoch: i32, regex: Option<&'static str>| {
            ConsumerGroupHeartbeatRequest::default()
                .with_member_id(StrBytes::from_static_str("a"))
                .with_member_epoch(epoch)
                .with_subscribed_topic_regex(regex.map(StrBytes::from_static_str))
                .with_topic_partitions((epoch == 0).then(Vec::new))
        };
        let topics_of = |r: &ConsumerGroupHeartbeatResponse| -> Vec<uuid::Uuid> {
            r.assignment
                .as_ref()
                .map(|a| a.topic_partitions.iter().map(|t| t.topic_id).collect())
                .unwrap_or_default()
        };
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(&beat(0, Some("orders-.*")), &topics, String::new(), 0);
        assert_eq!(a.error_code, 0);
        assert_eq!(topics_of(&a), [id(1)], "whole names only: not xorders-eu");
        assert_eq!(parts(&a), Some(vec![0, 1]));
        // A new matching topic joins the subscription at the next heartbeat.
        topics.insert("orders-us".to_string(), (id(4), 1));
        let a = g.heartbeat(&beat(1, None), &topics, String::new(), 1);
        assert_eq!(a.member_epoch, 2, "the group epoch moved");
        assert_eq!(topics_of(&a), [id(1), id(4)]);
        // An empty regex clears it.
        let a = g.heartbeat(&beat(2, Some("")), &topics, String::new(), 2);
        assert_eq!(parts(&a), Some(vec![]), "{a:?}");
        let bad = g.heartbeat(&beat(3, Some("orders-(")), &topics, String::new(), 3);
        assert_eq!(bad.error_code, Code::InvalidRegularExpression.value());
    }

    #[test]
    fn a_partition_moves_only_after_its_owner_released_it() {
        let mut g = ConsumerGroup::default();
        let a = g.heartbeat(&beat("a", 0, Some(vec![])), &view(), String::new(), 0);
        assert_eq!((parts(&a), a.member_epoch), (Some(vec![0, 1, 2, 3]), 1));
        let b = g.heartbeat(&beat("b", 0, Some(vec![])), &view(), String::new(), 1);
        assert_eq!(parts(&b), Some(vec![]), "nothing free yet");
        assert_eq!(
            b.member_epoch, 2,
            "nothing to revoke: b is at the group epoch"
        );
        let a = g.heartbeat(&beat("a", 1, None), &view(), String::new(), 2);
        assert_eq!(parts(&a), Some(vec![0, 1]), "a gives up half");
        assert_eq!(a.member_epoch, 1, "a stays at its epoch until it confirms");
        let b = g.heartbeat(&beat("b", 2, None), &view(), String::new(), 3);
        assert_eq!(parts(&b), None, "a has not released them");
        let a = g.heartbeat(&beat("a", 1, Some(vec![0, 1])), &view(), String::new(), 4);
        assert_eq!(a.member_epoch, 2);
        let b = g.heartbeat(&beat("b", 2, None), &view(), String::new(), 5);
        assert_eq!(parts(&b), Some(vec![2, 3]));
        let stale = g.heartbeat(&beat("b", 1, None), &view(), String::new(), 6);
        assert_eq!(stale.error_code, Code::FencedMemberEpoch.value());
        assert_eq!(g.check_commit("a", 2), Code::None);
        assert_eq!(g.check_commit("a", 1), Code::StaleMemberEpoch);
    }
}
