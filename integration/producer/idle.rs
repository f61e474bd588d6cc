//! `metadata.max.idle.ms` (KIP-526): a producer stops asking for the
//! metadata of a topic it no longer sends to, and a later send to that
//! topic fetches it again. Seen through the Metadata requests a
//! [`ClusterProxy`] relays, on the real broker and the fake alike.

use std::time::Duration;

use purekafka::producer::{Producer, ProducerConfig, ProducerConfigBuilder, ProducerRecord};
use purekafka::{
    ClientConfig, ClientConfigBuilder, Cluster, Consumer, ConsumerConfig, TopicPartition,
};
use tokio::time::Instant;

use crate::support::{self, proxy::ClusterProxy, proxy::MetadataTopics};

/// The four behaviours below each wait out `metadata.max.idle.ms` once (5 s,
/// the least allowed, then the sweep). They run side by side, each with its
/// own topics, proxy and clients, so the suite waits that bound out once
/// instead of four times; each one's failure messages name its topics.
#[tokio::test]
async fn idle_topics_are_dropped_and_a_later_send_fetches_them_again() {
    let Some(bootstrap) = support::bootstrap("idle_topics_are_dropped") else {
        return;
    };
    let cluster = Cluster::connect(support::config(&bootstrap))
        .await
        .expect("cluster");
    tokio::join!(
        a_topic_unused_for_metadata_max_idle_is_no_longer_refreshed(&cluster),
        a_missing_topic_is_asked_for_again_only_until_it_is_idle(&cluster),
        a_send_after_the_idle_bound_fetches_the_topic_again(&cluster),
        topics_a_consumer_tracks_on_a_shared_cluster_are_kept(&cluster),
    );
}

/// Whether a Metadata request named `topic`.
fn names(request: &MetadataTopics, topic: &str) -> bool {
    request
        .as_ref()
        .is_some_and(|topics| topics.iter().any(|t| t == topic))
}

/// A producer through `proxy` with `metadata.max.idle.ms` at 5 s (the
/// least Java allows), its client built on by `client`.
fn through_proxy(
    proxy: &ClusterProxy,
    client_id: &str,
    client: impl FnOnce(ClientConfigBuilder) -> ClientConfigBuilder,
) -> ProducerConfigBuilder {
    ProducerConfig::builder()
        .client(client(
            ClientConfig::builder()
                .bootstrap_servers(proxy.bootstrap())
                .client_id(client_id)
                .request_timeout(Duration::from_secs(10))
                .default_api_timeout(Duration::from_secs(30)),
        ))
        .metadata_max_idle(Duration::from_secs(5))
}

/// Sends one record to `topic` and waits for its acknowledgement.
async fn deliver(producer: &Producer, topic: &str) {
    producer
        .send(ProducerRecord::new(topic).value("v"))
        .await
        .unwrap_or_else(|e| panic!("send to {topic}: {e}"))
        .await
        .unwrap_or_else(|e| panic!("delivery to {topic}: {e}"));
}

/// Sends to `topic` every 200 ms until `done` holds for the Metadata
/// requests recorded from index `from` on, or `limit` passes; returns
/// whether it held.
async fn send_until(
    producer: &Producer,
    proxy: &ClusterProxy,
    topic: &str,
    from: usize,
    limit: Duration,
    done: impl Fn(&[MetadataTopics]) -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done(proxy.metadata_requests().get(from..).unwrap_or_default()) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        deliver(producer, topic).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A producer that sent to topic `idle` once, then only to `busy`, stops
/// naming `idle` in its periodic Metadata requests once it was unused for
/// `metadata.max.idle.ms` (5 s, the least allowed; `metadata.max.age.ms`
/// 500 ms so refreshes come often). A later send to `idle` fetches its
/// metadata afresh, as a first send does, and tracks it again.
async fn a_topic_unused_for_metadata_max_idle_is_no_longer_refreshed(cluster: &Cluster) {
    let idle = support::unique_topic("idle-once");
    let busy = support::unique_topic("idle-busy");
    support::create_topic(cluster, &idle, 1).await;
    support::create_topic(cluster, &busy, 1).await;
    let proxy = ClusterProxy::start(cluster).await.expect("proxy");
    let config = through_proxy(&proxy, "purekafka-it-idle", |c| {
        c.metadata_max_age(Duration::from_millis(500))
    })
    .delivery_timeout(Duration::from_secs(30))
    .build()
    .expect("config");
    let producer = Producer::connect(config).await.expect("producer");

    deliver(&producer, &idle).await;
    let both = |rs: &[MetadataTopics]| rs.iter().any(|r| names(r, &idle) && names(r, &busy));
    assert!(
        send_until(&producer, &proxy, &busy, 0, Duration::from_secs(4), both).await,
        "no periodic Metadata request named both topics while both were in use: {:?}",
        proxy.metadata_requests()
    );

    // Only `busy` from here: within 1.25 times the idle bound (plus a margin
    // for a loaded machine) a refresh names `busy` without `idle`.
    let start = proxy.metadata_requests().len();
    let busy_only = |rs: &[MetadataTopics]| rs.iter().any(|r| names(r, &busy) && !names(r, &idle));
    assert!(
        send_until(
            &producer,
            &proxy,
            &busy,
            start,
            Duration::from_secs(30),
            busy_only
        )
        .await,
        "{idle} still named by every Metadata request 30 s after its last send: {:?}",
        proxy.metadata_requests().get(start..)
    );
    // And it stays dropped: the next refreshes (about 500 ms apart) name
    // `busy` only.
    let dropped = proxy.metadata_requests().len();
    let two_refreshes = |rs: &[MetadataTopics]| rs.iter().filter(|r| names(r, &busy)).count() >= 2;
    send_until(
        &producer,
        &proxy,
        &busy,
        dropped,
        Duration::from_secs(10),
        two_refreshes,
    )
    .await;
    let after = proxy.metadata_requests().split_off(dropped);
    assert!(
        after.iter().filter(|r| names(r, &busy)).count() >= 2,
        "no periodic refresh of {busy}: {after:?}"
    );
    assert!(
        !after.iter().any(|r| r.is_none() || names(r, &idle)),
        "{idle} asked for again though unused: {after:?}"
    );

    // A send to the dropped topic succeeds: it waits for the topic's own
    // Metadata request, as a first send does, and the periodic refreshes
    // name the topic again.
    let resend = proxy.metadata_requests().len();
    deliver(&producer, &idle).await;
    let fetched = proxy.metadata_requests().split_off(resend);
    assert!(
        fetched
            .iter()
            .any(|r| r.as_deref() == Some(std::slice::from_ref(&idle))),
        "the send to {idle} did not ask for its metadata: {fetched:?}"
    );
    assert!(
        send_until(
            &producer,
            &proxy,
            &busy,
            resend,
            Duration::from_secs(10),
            both
        )
        .await,
        "{idle} not tracked again after a send: {:?}",
        proxy.metadata_requests().get(resend..)
    );
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
}

/// A send to a topic that does not exist makes the client ask for it again
/// at `retry.backoff.ms`, doubling to `retry.backoff.max.ms`, while it is
/// tracked. Tracked while used, it is dropped once unused for
/// `metadata.max.idle.ms`, and then nothing asks for it any more
/// (`metadata.max.age.ms` stays at its 5 minutes, so any request naming
/// it would be a re-ask).
async fn a_missing_topic_is_asked_for_again_only_until_it_is_idle(cluster: &Cluster) {
    let missing = support::unique_topic("idle-missing");
    let proxy = ClusterProxy::start(cluster).await.expect("proxy");
    let config = through_proxy(&proxy, "purekafka-it-idle-missing", |c| {
        c.set("retry.backoff.max.ms", "200")
            .expect("retry.backoff.max.ms")
    })
    .max_block(Duration::from_secs(1))
    .build()
    .expect("config");
    let producer = Producer::connect(config).await.expect("producer");
    let err = producer
        .send(ProducerRecord::new(&missing).value("v"))
        .await
        .err()
        .unwrap_or_else(|| panic!("a send to the missing {missing} was accepted"));
    assert!(err.to_string().contains(&missing), "{err}");

    // Polls every 200 ms until four polls in a row (0.8 s, four times the
    // longest re-ask interval, `retry.backoff.max.ms`) saw no new request
    // naming the topic.
    let asked = || {
        proxy
            .metadata_requests()
            .iter()
            .filter(|r| names(r, &missing))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut last, mut quiet) = (asked(), 0);
    while quiet < 4 {
        assert!(
            Instant::now() < deadline,
            "{missing} still asked for 30 s after the failed send ({last} requests): {:?}",
            proxy.metadata_requests()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = asked();
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
    }
    assert!(
        last >= 3,
        "{missing} was not asked for again while tracked ({last} requests)"
    );
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
}

/// With `metadata.max.age.ms` at its 5 minutes, no refresh comes by to
/// drop an idle topic: the drop is timed on its own, and the next send to
/// the topic asks for its metadata again, as a first send does.
///
/// Probed on topics all sent to at once: from the idle bound on, every
/// 250 ms a send goes to one not probed yet (a send to a topic not yet
/// dropped marks it used again, so each probe takes a fresh one), until a
/// send asks for its topic's metadata. The drop comes by 1.25 times the
/// bound (6.25 s); the probes reach 8 s, a margin for a late sweep on a
/// loaded machine.
async fn a_send_after_the_idle_bound_fetches_the_topic_again(cluster: &Cluster) {
    const PROBES: usize = 12;
    let topics: Vec<String> = (0..PROBES)
        .map(|_| support::unique_topic("idle-again"))
        .collect();
    let mut creating = tokio::task::JoinSet::new();
    for topic in &topics {
        let (cluster, topic) = (cluster.clone(), topic.clone());
        creating.spawn(async move { support::create_topic(&cluster, &topic, 1).await });
    }
    creating.join_all().await;
    let proxy = ClusterProxy::start(cluster).await.expect("proxy");
    let config = through_proxy(&proxy, "purekafka-it-idle-again", |c| c)
        .build()
        .expect("config");
    let producer = Producer::connect(config).await.expect("producer");
    // The bootstrap answer (all topics) already lists the topics: the
    // first sends need no request of their own.
    for topic in &topics {
        deliver(&producer, topic).await;
    }
    let idle_from = Instant::now() + Duration::from_secs(5);
    tokio::time::sleep_until(idle_from).await;
    let mut probed = Vec::new();
    for topic in &topics {
        let before = proxy.metadata_requests().len();
        deliver(&producer, topic).await;
        let fetched = proxy.metadata_requests().split_off(before);
        if fetched
            .iter()
            .any(|r| r.as_deref() == Some(std::slice::from_ref(topic)))
        {
            break;
        }
        probed.push((topic, idle_from.elapsed(), fetched));
        assert!(
            probed.len() < PROBES,
            "no send from the idle bound on asked for its topic's metadata: {probed:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
}

/// On a `Cluster` shared with a consumer, only the producer's own topics
/// go idle: a topic the consumer is assigned stays in every refresh though
/// the producer stopped sending to it, while one only the producer used is
/// dropped.
async fn topics_a_consumer_tracks_on_a_shared_cluster_are_kept(cluster: &Cluster) {
    let consumed = support::unique_topic("idle-consumed");
    let produced = support::unique_topic("idle-produced");
    support::create_topic(cluster, &consumed, 1).await;
    support::create_topic(cluster, &produced, 1).await;
    let proxy = ClusterProxy::start(cluster).await.expect("proxy");
    let shared = Cluster::connect(
        ClientConfig::builder()
            .bootstrap_servers(proxy.bootstrap())
            .client_id("purekafka-it-idle-shared")
            .metadata_max_age(Duration::from_secs(1))
            .request_timeout(Duration::from_secs(10))
            .default_api_timeout(Duration::from_secs(30))
            .build()
            .expect("client config"),
    )
    .await
    .expect("shared cluster");
    let consumer = Consumer::with_cluster(
        shared.clone(),
        ConsumerConfig::builder()
            .bootstrap_servers(proxy.bootstrap())
            .build()
            .expect("consumer config"),
    );
    consumer.assign(vec![TopicPartition::new(consumed.as_str(), 0)]);
    let producer = Producer::with_cluster(
        shared,
        ProducerConfig::builder()
            .bootstrap_servers(proxy.bootstrap())
            .metadata_max_idle(Duration::from_secs(5))
            .build()
            .expect("producer config"),
    )
    .await
    .expect("producer");
    deliver(&producer, &consumed).await;
    deliver(&producer, &produced).await;

    // Within 1.25 times the idle bound (plus a margin for a loaded machine) a
    // refresh no longer names `produced`; it still names `consumed`.
    let start = proxy.metadata_requests().len();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dropped = loop {
        let requests = proxy.metadata_requests().split_off(start);
        if let Some(r) = requests
            .iter()
            .find(|r| r.is_some() && !names(r, &produced))
        {
            break r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{produced} still named 30 s after its last send: {requests:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        names(&dropped, &consumed),
        "the consumer's {consumed} was dropped with the producer's topic: {dropped:?}"
    );
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    drop(consumer);
}
