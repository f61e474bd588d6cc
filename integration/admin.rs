//! The admin client against the real broker: every call, mixed batches where
//! one resource fails and the others succeed, and offset resets.

use std::time::Duration;

use purekafka::admin::{
    AclBinding, AclFilter, AclOperation, AclPermission, AclResourceType, AlterConfigOp,
    ConfigResource, ConfigSource, GroupType, NewTopic, OffsetSpec, PatternType, ResetSpec,
};
use purekafka::consumer::group::{GroupConfig, GroupEvent, GroupMember};
use purekafka::{Admin, Cluster, KafkaCode, TopicPartition};

use crate::support::{self, records};

async fn admin(bootstrap: &str) -> Admin {
    support::trace();
    Admin::with_cluster(
        Cluster::connect(support::config(bootstrap))
            .await
            .expect("connect"),
    )
}

fn code(e: &purekafka::Error) -> Option<i16> {
    e.kafka_code().map(KafkaCode::code)
}

#[tokio::test]
async fn admin_topics_mixed_batches_report_per_topic() {
    let Some(bootstrap) = support::bootstrap("admin_topics_mixed_batches_report_per_topic") else {
        return;
    };
    let admin = admin(&bootstrap).await;
    let existing = support::unique_topic("adm-exists");
    let fresh = support::unique_topic("adm-fresh");
    support::create_topic(admin.cluster(), &existing, 1).await;

    let res = admin
        .create_topics(
            &[
                NewTopic::new(&existing, 1),
                NewTopic::new(&fresh, 2).config("retention.ms", "3600000"),
                NewTopic::new("bad name!", 1),
            ],
            false,
        )
        .await
        .expect("CreateTopics");
    let err = res[&existing].as_ref().unwrap_err();
    assert_eq!(code(err), Some(36), "{err}");
    assert!(err.to_string().contains(&existing), "{err}");
    assert!(res[&fresh].is_ok(), "{:?}", res[&fresh]);
    let bad = res["bad name!"].as_ref().unwrap_err();
    assert_eq!(code(bad), Some(17), "{bad}");

    // validate-only creates nothing.
    let ghost = support::unique_topic("adm-ghost");
    let v = admin
        .create_topics(&[NewTopic::new(&ghost, 1)], true)
        .await
        .unwrap();
    assert!(v[&ghost].is_ok());

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let desc = loop {
        let d = admin
            .describe_topics(&[fresh.clone(), ghost.clone()])
            .await
            .unwrap();
        let ready = d[&fresh]
            .as_ref()
            .is_ok_and(|t| t.partitions.len() == 2 && t.partitions.iter().all(|p| p.leader >= 0));
        if ready || tokio::time::Instant::now() > deadline {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let t = desc[&fresh].as_ref().expect("fresh described");
    assert_eq!(t.partitions.len(), 2);
    assert_eq!(t.id.len(), 22);
    assert!(t.partitions.iter().all(|p| p.replicas.contains(&p.leader)));
    assert_eq!(
        code(desc[&ghost].as_ref().unwrap_err()),
        Some(3),
        "validate-only must not create"
    );

    let listed = admin.list_topics(false).await.unwrap();
    assert!(listed.iter().any(|t| t.name == fresh));
    assert!(!listed.iter().any(|t| t.internal));

    let grown = admin
        .create_partitions(&[(fresh.clone(), 3), (existing.clone(), 1)], false)
        .await
        .unwrap();
    assert!(grown[&fresh].is_ok(), "{:?}", grown[&fresh]);
    assert_eq!(code(grown[&existing].as_ref().unwrap_err()), Some(37));

    let deleted = admin
        .delete_topics(&[fresh.clone(), ghost.clone()])
        .await
        .unwrap();
    assert!(deleted[&fresh].is_ok(), "{:?}", deleted[&fresh]);
    assert_eq!(code(deleted[&ghost].as_ref().unwrap_err()), Some(3));
    records::delete_topic(admin.cluster(), &existing).await;
}

#[tokio::test]
async fn admin_configs_describe_alter_and_broker() {
    let Some(bootstrap) = support::bootstrap("admin_configs_describe_alter_and_broker") else {
        return;
    };
    let admin = admin(&bootstrap).await;
    let topic = support::unique_topic("adm-cfg");
    support::create_topic(admin.cluster(), &topic, 1).await;
    let res = ConfigResource::Topic(topic.clone());
    let missing = ConfigResource::Topic(support::unique_topic("adm-nope"));

    let before = admin
        .describe_configs(&[res.clone(), missing.clone()], &[])
        .await
        .unwrap();
    let entries = before[&res].as_ref().unwrap();
    let retention = entries.iter().find(|e| e.name == "retention.ms").unwrap();
    assert_ne!(retention.source, ConfigSource::DynamicTopic);
    assert!(before[&missing].is_err());

    let altered = admin
        .incremental_alter_configs(
            &[
                (
                    res.clone(),
                    vec![AlterConfigOp::Set("retention.ms".into(), "1234567".into())],
                ),
                (
                    missing.clone(),
                    vec![AlterConfigOp::Set("retention.ms".into(), "1".into())],
                ),
            ],
            false,
        )
        .await
        .unwrap();
    assert!(altered[&res].is_ok(), "{:?}", altered[&res]);
    let err = altered[&missing].as_ref().unwrap_err();
    assert!(
        err.to_string().contains("IncrementalAlterConfigs topic"),
        "{err}"
    );

    // The change reaches the answering broker's metadata cache shortly
    // after the controller applies it (KRaft): wait for it, bounded.
    let mut after = None;
    for _ in 0..50 {
        let got = admin
            .describe_configs(std::slice::from_ref(&res), &["retention.ms".to_owned()])
            .await
            .unwrap();
        let shows = got[&res].as_ref().unwrap()[0].value.as_deref() == Some("1234567");
        after = Some(got);
        if shows {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let after = after.expect("described");
    let e = &after[&res].as_ref().unwrap()[0];
    assert_eq!(e.value.as_deref(), Some("1234567"));
    assert_eq!(e.source, ConfigSource::DynamicTopic);

    let reverted = admin
        .incremental_alter_configs(
            &[(
                res.clone(),
                vec![AlterConfigOp::Delete("retention.ms".into())],
            )],
            false,
        )
        .await
        .unwrap();
    assert!(reverted[&res].is_ok());

    let broker_id = *admin.cluster().metadata().brokers.keys().next().unwrap();
    let broker = ConfigResource::Broker(broker_id);
    let b = admin
        .describe_configs(&[broker.clone(), ConfigResource::Broker(9999)], &[])
        .await
        .unwrap();
    let entries = b[&broker].as_ref().unwrap();
    assert!(entries
        .iter()
        .any(|e| e.name == "log.dirs" || e.name == "log.dir"));
    assert!(b[&ConfigResource::Broker(9999)].is_err());
    records::delete_topic(admin.cluster(), &topic).await;
}

#[tokio::test]
async fn admin_list_offsets_by_time_and_delete_records() {
    let Some(bootstrap) = support::bootstrap("admin_list_offsets_by_time_and_delete_records")
    else {
        return;
    };
    let admin = admin(&bootstrap).await;
    let topic = support::unique_topic("adm-offsets");
    support::create_topic(admin.cluster(), &topic, 1).await;
    let t0 = records::now_ms() - 60_000;
    let batch: Vec<(i64, String)> = (0..4).map(|i| (t0 + i * 1000, format!("v{i}"))).collect();
    records::produce(admin.cluster(), &topic, 0, &batch).await;
    let tp = TopicPartition::new(topic.as_str(), 0);
    let gone = TopicPartition::new(support::unique_topic("adm-nope").as_str(), 0);

    let ask = |s: OffsetSpec| vec![(tp.clone(), s)];
    let off = |m: &std::collections::BTreeMap<
        _,
        purekafka::Result<purekafka::admin::ListedOffset>,
    >| { m[&tp].as_ref().unwrap().offset };
    assert_eq!(
        off(&admin
            .list_offsets(&ask(OffsetSpec::Earliest))
            .await
            .unwrap()),
        0
    );
    assert_eq!(
        off(&admin.list_offsets(&ask(OffsetSpec::Latest)).await.unwrap()),
        4
    );
    let by_time = admin
        .list_offsets(&ask(OffsetSpec::Timestamp(t0 + 1500)))
        .await
        .unwrap();
    assert_eq!(by_time[&tp].as_ref().unwrap().offset, 2);
    assert_eq!(by_time[&tp].as_ref().unwrap().timestamp, t0 + 2000);
    let max = admin
        .list_offsets(&ask(OffsetSpec::MaxTimestamp))
        .await
        .unwrap();
    assert_eq!(off(&max), 3);
    let future = admin
        .list_offsets(&ask(OffsetSpec::Timestamp(t0 + 3_600_000)))
        .await
        .unwrap();
    assert_eq!(off(&future), -1);

    let mixed = admin
        .list_offsets(&[
            (tp.clone(), OffsetSpec::Latest),
            (gone.clone(), OffsetSpec::Latest),
        ])
        .await
        .unwrap();
    assert_eq!(mixed[&tp].as_ref().unwrap().offset, 4);
    assert!(mixed[&gone].is_err());

    let del = admin.delete_records(&[(tp.clone(), 2)]).await.unwrap();
    assert_eq!(*del[&tp].as_ref().unwrap(), 2);
    assert_eq!(
        off(&admin
            .list_offsets(&ask(OffsetSpec::Earliest))
            .await
            .unwrap()),
        2
    );

    let producers = admin
        .describe_producers(std::slice::from_ref(&tp))
        .await
        .unwrap();
    assert!(producers[&tp].is_ok(), "{:?}", producers[&tp]);
    records::delete_topic(admin.cluster(), &topic).await;
}

#[tokio::test]
async fn admin_group_offsets_list_describe_reset_delete() {
    let Some(bootstrap) = support::bootstrap("admin_group_offsets_list_describe_reset_delete")
    else {
        return;
    };
    let admin = admin(&bootstrap).await;
    let topic = support::unique_topic("adm-group");
    support::create_topic(admin.cluster(), &topic, 2).await;
    for p in 0..2 {
        records::produce(admin.cluster(), &topic, p, &records::values("r", 5)).await;
    }
    let group = support::unique_topic("adm-g");
    let tps: Vec<TopicPartition> = (0..2)
        .map(|p| TopicPartition::new(topic.as_str(), p))
        .collect();

    // An offsets-only group, as a manually assigned consumer leaves.
    let commit = admin
        .alter_group_offsets(&group, &[(tps[0].clone(), 3), (tps[1].clone(), 4)])
        .await
        .unwrap();
    assert!(commit.values().all(|r| r.is_ok()), "{commit:?}");

    let listed = admin.list_groups(&[], &[]).await.unwrap();
    let g = listed.iter().find(|g| g.group_id == group).expect("listed");
    assert_eq!(g.state, "Empty");
    let desc = admin
        .describe_groups(std::slice::from_ref(&group))
        .await
        .unwrap();
    let d = desc[&group].as_ref().unwrap();
    assert_eq!(d.group_type, GroupType::Classic);
    assert_eq!(d.state, "Empty");
    assert!(d.members.is_empty());

    let committed = admin.list_group_offsets(&group, None).await.unwrap();
    assert_eq!(committed[&tps[0]].as_ref().unwrap().offset, 3);
    assert_eq!(committed[&tps[1]].as_ref().unwrap().offset, 4);

    // Planning (dry run) changes nothing.
    let plan = admin
        .plan_offset_reset(&group, &tps, ResetSpec::ShiftBy(-2))
        .await
        .unwrap();
    let targets: Vec<i64> = plan.iter().map(|p| p.target).collect();
    assert_eq!(targets, vec![1, 2]);
    let still = admin.list_group_offsets(&group, Some(&tps)).await.unwrap();
    assert_eq!(still[&tps[0]].as_ref().unwrap().offset, 3);
    // Executing moves them.
    let exec: Vec<(TopicPartition, i64)> = plan
        .iter()
        .map(|p| (p.partition.clone(), p.target))
        .collect();
    admin.alter_group_offsets(&group, &exec).await.unwrap();
    let moved = admin.list_group_offsets(&group, Some(&tps)).await.unwrap();
    assert_eq!(moved[&tps[0]].as_ref().unwrap().offset, 1);
    assert_eq!(moved[&tps[1]].as_ref().unwrap().offset, 2);

    let deleted = admin.delete_group_offsets(&group, &tps[..1]).await.unwrap();
    assert!(deleted[&tps[0]].is_ok(), "{deleted:?}");
    let after = admin.list_group_offsets(&group, Some(&tps)).await.unwrap();
    assert!(after[&tps[0]].is_none());

    let nope = support::unique_topic("adm-nogroup");
    let dg = admin
        .delete_groups(&[group.clone(), nope.clone()])
        .await
        .unwrap();
    assert!(dg[&group].is_ok(), "{:?}", dg[&group]);
    assert_eq!(code(dg[&nope].as_ref().unwrap_err()), Some(69));
    records::delete_topic(admin.cluster(), &topic).await;
}

#[tokio::test]
async fn admin_describes_live_classic_member_and_refuses_commit() {
    let Some(bootstrap) =
        support::bootstrap("admin_describes_live_classic_member_and_refuses_commit")
    else {
        return;
    };
    let admin = admin(&bootstrap).await;
    let topic = support::unique_topic("adm-live");
    support::create_topic(admin.cluster(), &topic, 2).await;
    let group = support::unique_topic("adm-live-g");
    let mut config = GroupConfig::new(&group);
    for (k, v) in [
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "100"),
    ] {
        config.try_set(k, v).expect("known").expect("valid");
    }
    let (member, mut events) =
        GroupMember::join(admin.cluster(), config, vec![topic.clone()]).expect("join");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(tokio::time::Instant::now() < deadline, "never assigned");
        member.notify_poll();
        match events.recv_timeout(Duration::from_millis(200)).await {
            Some(GroupEvent::Assigned(p)) if !p.is_empty() => break,
            Some(GroupEvent::Fatal(e)) => panic!("{e}"),
            _ => {}
        }
    }
    // Keep answering events (revocations on leave) as a consumer would.
    tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let GroupEvent::Revoked(_, ack) = e {
                ack.ack();
            }
        }
    });
    let desc = admin
        .describe_groups(std::slice::from_ref(&group))
        .await
        .unwrap();
    let d = desc[&group].as_ref().unwrap();
    assert_eq!(d.state, "Stable");
    assert_eq!(d.members.len(), 1);
    let assigned: Vec<String> = d.members[0]
        .assignment
        .iter()
        .map(|tp| tp.to_string())
        .collect();
    assert_eq!(assigned, vec![format!("{topic}-0"), format!("{topic}-1")]);

    // An admin commit to a group with live members is refused, per partition.
    let tp = TopicPartition::new(topic.as_str(), 0);
    let r = admin.alter_group_offsets(&group, &[(tp.clone(), 0)]).await;
    let refused = match r {
        Ok(m) => m[&tp].clone().unwrap_err(),
        Err(e) => e,
    };
    assert!(
        matches!(code(&refused), Some(25) | Some(22)),
        "expected UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION: {refused}"
    );
    member.close().await.expect("leave");
    records::delete_topic(admin.cluster(), &topic).await;
}

#[tokio::test]
async fn admin_cluster_features_transactions_and_acls() {
    let Some(bootstrap) = support::bootstrap("admin_cluster_features_transactions_and_acls") else {
        return;
    };
    let admin = admin(&bootstrap).await;
    let c = admin.describe_cluster().await.unwrap();
    assert!(!c.brokers.is_empty());
    assert_eq!(
        Some(c.cluster_id.clone()),
        admin.cluster().metadata().cluster_id
    );
    assert!(c.brokers.iter().any(|b| b.id == c.controller_id));

    let f = admin.features().await.unwrap();
    assert!(
        f.finalized.iter().any(|x| x.name == "metadata.version"),
        "{f:?}"
    );

    admin.list_transactions(&[]).await.unwrap();
    let id = support::unique_topic("adm-txn");
    let t = admin
        .describe_transactions(std::slice::from_ref(&id))
        .await
        .unwrap();
    assert_eq!(
        code(t[&id].as_ref().unwrap_err()),
        Some(105),
        "{:?}",
        t[&id]
    );

    // The test broker runs without an authorizer: ACL calls must fail with
    // a typed SECURITY_DISABLED; with one, they must work.
    let topic = support::unique_topic("adm-acl");
    let binding = AclBinding {
        resource_type: AclResourceType::Topic,
        resource_name: topic.clone(),
        pattern_type: PatternType::Literal,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: AclOperation::Read,
        permission: AclPermission::Allow,
    };
    let filter = AclFilter {
        resource_name: Some(topic.clone()),
        ..AclFilter::any()
    };
    match admin.describe_acls(&filter).await {
        Err(e) => {
            assert_eq!(code(&e), Some(54), "{e}");
            assert!(e.to_string().contains("SecurityDisabled"), "{e}");
            let created = admin.create_acls(&[binding]).await;
            let e = match created {
                Ok(v) => v[0].1.clone().unwrap_err(),
                Err(e) => e,
            };
            assert_eq!(code(&e), Some(54), "{e}");
        }
        Ok(_) => {
            let created = admin
                .create_acls(std::slice::from_ref(&binding))
                .await
                .unwrap();
            assert!(created[0].1.is_ok());
            let deleted = admin.delete_acls(&[filter]).await.unwrap();
            assert_eq!(deleted[0].as_ref().unwrap(), &vec![binding]);
        }
    }
}
