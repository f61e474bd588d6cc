//! OIDC client credentials (KIP-768, feature `oauth`) against the broker of
//! `scripts/kafka up --oidc`: Kafka's `OAuthBearerValidatorCallbackHandler`
//! checks each JWT's signature against the test identity provider's JWKS,
//! its audience, issuer and expiry. The provider (the testkit's
//! `oidc-server`) issues 1-hour tokens to `purekafka-app` and 25-second
//! tokens to `purekafka-short`.

use std::time::{Duration, Instant};

use purekafka::http::{HttpAuth, HttpClient, HttpConfig};
use purekafka::producer::{Producer, ProducerConfig, ProducerRecord};
use purekafka::{ClientConfig, ClientConfigBuilder, Cluster, Error};

use crate::support::{self, read::read_partition};

/// Clients `scripts/kafka up --oidc` registers with its identity provider.
const APP: (&str, &str) = ("purekafka-app", "app-secret");
const SHORT: (&str, &str) = ("purekafka-short", "short-secret");

/// The identity provider's base URL (`PUREKAFKA_OIDC_IDP_URL`, default the
/// `--oidc` mode's `http://127.0.0.1:19395`).
fn idp_url() -> String {
    std::env::var("PUREKAFKA_OIDC_IDP_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:19395".into())
}

/// A client configured only through the Java property names.
fn client(
    bootstrap: &str,
    token_url: &str,
    id: &str,
    secret: &str,
    extra: &[(&str, &str)],
) -> ClientConfigBuilder {
    let mut props = vec![
        ("bootstrap.servers", bootstrap),
        ("client.id", "purekafka-it-oauth"),
        ("request.timeout.ms", "10000"),
        ("default.api.timeout.ms", "30000"),
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "OAUTHBEARER"),
        ("sasl.oauthbearer.token.endpoint.url", token_url),
        ("sasl.oauthbearer.client.credentials.client.id", id),
        ("sasl.oauthbearer.client.credentials.client.secret", secret),
    ];
    props.extend_from_slice(extra);
    let mut b = ClientConfig::builder();
    for (k, v) in props {
        b = b.set(k, v).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
    b
}

/// How many tokens the identity provider issued to `client`.
async fn issued(client: &str) -> u64 {
    let http = HttpClient::new(HttpConfig::default()).expect("http client");
    let resp = http
        .get(
            &format!("{}/issued/{client}", idp_url()),
            "text/plain",
            &HttpAuth::None,
        )
        .await
        .expect("identity provider answers");
    String::from_utf8_lossy(&resp.body)
        .trim()
        .parse()
        .expect("a count")
}

async fn produce(producer: &Producer, topic: &str, label: &str, n: usize, gap: Duration) {
    for i in 0..n {
        producer
            .send(ProducerRecord::new(topic).value(format!("{label}-{i}")))
            .await
            .expect("enqueue")
            .await
            .unwrap_or_else(|e| panic!("{label}: delivery of record {i}: {e}"));
        if !gap.is_zero() {
            tokio::time::sleep(gap).await;
        }
    }
}

async fn read_values(cluster: &Cluster, topic: &str) -> Vec<String> {
    read_partition(cluster, topic, 0)
        .await
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Signs in with `cfg` (a cluster and a producer, each with its own token
/// provider) and creates a fresh one-partition topic named after `prefix`.
async fn signed_in(cfg: ClientConfigBuilder, prefix: &str) -> (Cluster, String, Producer) {
    let cluster = Cluster::connect(cfg.clone().build().expect("config"))
        .await
        .expect("connect with a client-credentials token");
    let topic = support::unique_topic(prefix);
    support::create_topic(&cluster, &topic, 1).await;
    let producer = Producer::connect(
        ProducerConfig::builder()
            .client(cfg)
            .delivery_timeout(Duration::from_secs(30))
            .build()
            .expect("producer config"),
    )
    .await
    .expect("producer");
    (cluster, topic, producer)
}

#[tokio::test]
async fn client_credentials_produce_and_read_back() {
    let Some(bootstrap) = support::bootstrap_oidc("client_credentials_produce") else {
        return;
    };
    support::trace();
    let token_url = format!("{}/token", idp_url());
    let before = issued(APP.0).await;
    let cfg = client(
        &bootstrap,
        &token_url,
        APP.0,
        APP.1,
        &[("sasl.oauthbearer.scope", "kafka")],
    );
    let (cluster, topic, producer) = signed_in(cfg, "oidc-app").await;
    produce(&producer, &topic, "app", 20, Duration::ZERO).await;
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let want: Vec<String> = (0..20).map(|i| format!("app-{i}")).collect();
    assert_eq!(read_values(&cluster, &topic).await, want);
    // Each provider (one per built config) fetched its token from the
    // endpoint; cached tokens serve every further connection.
    let got = issued(APP.0).await - before;
    assert!(
        (1..=4).contains(&got),
        "{got} tokens issued for one cluster and one producer"
    );
}

/// 25-second tokens during a 60-second produce: the broker caps each
/// session at the token's expiry (KIP-368), connections are replaced before
/// it, the provider fetches new tokens at 80-85% of their lifetime, and not
/// one record is lost or duplicated.
#[tokio::test]
async fn short_tokens_are_refreshed_during_a_long_produce() {
    let Some(bootstrap) = support::bootstrap_oidc("short_tokens_refreshed") else {
        return;
    };
    support::trace();
    let token_url = format!("{}/token", idp_url());
    let cfg = client(&bootstrap, &token_url, SHORT.0, SHORT.1, &[]);
    let (cluster, topic, producer) = signed_in(cfg, "oidc-short").await;
    let before = issued(SHORT.0).await;
    let started = Instant::now();
    // 240 records, one every 250 ms: about 60 s, past two token expiries.
    produce(&producer, &topic, "short", 240, Duration::from_millis(250)).await;
    let took = started.elapsed();
    producer
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let refreshed = issued(SHORT.0).await - before;
    eprintln!("short tokens: {refreshed} issued during {took:?} of producing");
    assert!(took >= Duration::from_secs(55), "{took:?}");
    assert!(
        refreshed >= 2,
        "only {refreshed} new token(s) in {took:?} with 25 s tokens"
    );
    let want: Vec<String> = (0..240).map(|i| format!("short-{i}")).collect();
    let got = read_values(&cluster, &topic).await;
    assert_eq!(got.len(), want.len(), "records lost or duplicated");
    assert_eq!(got, want);
}

#[tokio::test]
async fn wrong_secret_is_a_clear_authentication_error() {
    let Some(bootstrap) = support::bootstrap_oidc("wrong_secret") else {
        return;
    };
    let token_url = format!("{}/token", idp_url());
    let cfg = client(&bootstrap, &token_url, APP.0, "not-the-secret", &[])
        .build()
        .expect("config");
    let started = Instant::now();
    let err = Cluster::connect(cfg)
        .await
        .expect_err("a wrong secret must fail");
    let msg = err.to_string();
    eprintln!("wrong secret: {msg} (after {:?})", started.elapsed());
    assert!(matches!(err, Error::Authentication { .. }), "{err:?}");
    assert!(!err.is_retriable(), "{msg}");
    assert!(
        msg.contains(&token_url),
        "the error names the endpoint: {msg}"
    );
    assert!(
        msg.contains("401") && msg.contains("invalid_client"),
        "{msg}"
    );
    assert!(!msg.contains("not-the-secret"), "the secret leaked: {msg}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// An endpoint that accepts connections and never answers: each request is
/// cut at connect + read timeout, retries stop when
/// `sasl.login.retry.backoff.max.ms` is spent, and the error names the URL.
/// Then a port nothing listens on: refused at once, same bound. Then the
/// silent one again with default login timeouts under a short connection
/// setup timeout.
#[tokio::test]
async fn unreachable_endpoint_is_bounded_by_the_timeouts() {
    let Some(bootstrap) = support::bootstrap_oidc("unreachable_endpoint") else {
        return;
    };
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/token", silent.local_addr().unwrap());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://{}/token", closed.local_addr().unwrap());
    drop(closed);
    let bounds = [
        ("sasl.login.connect.timeout.ms", "500"),
        ("sasl.login.read.timeout.ms", "500"),
        ("sasl.login.retry.backoff.ms", "100"),
        ("sasl.login.retry.backoff.max.ms", "1500"),
    ];
    for url in [&silent_url, &closed_url] {
        let cfg = client(&bootstrap, url, APP.0, APP.1, &bounds)
            .build()
            .expect("config");
        let started = Instant::now();
        let err = Cluster::connect(cfg)
            .await
            .expect_err("no token, no connection");
        let took = started.elapsed();
        let msg = err.to_string();
        eprintln!("{url}: {msg} (after {took:?})");
        assert!(
            msg.contains(url.as_str()),
            "the error names the endpoint: {msg}"
        );
        assert!(msg.contains("gave up after"), "{msg}");
        // One request at most 1 s, retries within 1.5 s; generous slack for
        // a loaded machine, far below the 30 s default.api.timeout.ms.
        assert!(took < Duration::from_secs(8), "{url}: {took:?}");
    }
    // Java-sized login timeouts (10 s + 10 s) but a 3 s connection setup:
    // the fetch is cut at 80% of the setup bound, and the error still names
    // the endpoint rather than a bare setup timeout.
    let cfg = client(
        &bootstrap,
        &silent_url,
        APP.0,
        APP.1,
        &[("socket.connection.setup.timeout.ms", "3000")],
    )
    .build()
    .expect("config");
    let started = Instant::now();
    let err = Cluster::connect(cfg)
        .await
        .expect_err("no token, no connection");
    let took = started.elapsed();
    let msg = err.to_string();
    eprintln!("{silent_url} under a 3 s setup: {msg} (after {took:?})");
    assert!(
        msg.contains(&silent_url) && msg.contains("did not answer"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    drop(silent);
}
