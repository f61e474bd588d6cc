//! SCRAM (KIP-84; RFC 5802, RFC 7677) and OAUTHBEARER (KIP-255; RFC 7628)
//! exchanges over the wire against the hostile broker (issue #17): the
//! fake runs a real SCRAM server (it checks nothing, but computes the
//! honest server signature), and lies in one step. Each lie must fail
//! `Cluster::connect` with `Authentication` naming the mechanism, the
//! broker and the reason, not retriable, within the bound, and never with
//! a secret in the message. No real broker needed.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use purekafka::net::sasl::UnsecuredJwt;
use purekafka::net::{SaslMechanism, SecurityProtocol};
use purekafka::{Cluster, Error};
use tokio::time::Instant;

use crate::hostile::client;
use crate::support::hostile::{Fault, HostileBroker, SaslLie, SCRAM_PASSWORD, SCRAM_USER};

/// Connection set-up bound (TCP, ApiVersions, the SASL exchange): PBKDF2
/// with 4096 rounds of SHA-512 in a debug build took over 4 s on the
/// shared 2-core machine under load.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Fails the test as a hang past the set-up bound (plus slack).
async fn within_setup<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    let bound = SETUP_TIMEOUT + Duration::from_secs(2);
    tokio::time::timeout(bound, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: still running after {bound:?} (hang)"))
}

fn config(b: &HostileBroker, mechanism: SaslMechanism) -> purekafka::ClientConfig {
    builder(b, mechanism).build().unwrap()
}

fn builder(b: &HostileBroker, mechanism: SaslMechanism) -> purekafka::ClientConfigBuilder {
    // PBKDF2 (4096 rounds) in a debug build outlasts the 1 s set-up bound
    // of the other hostile tests.
    let c = client(b)
        .connection_setup_timeout(SETUP_TIMEOUT)
        .security_protocol(SecurityProtocol::SaslPlaintext)
        .sasl_mechanism(mechanism);
    match mechanism {
        SaslMechanism::OAuthBearer => c.sasl_token_provider(Arc::new(UnsecuredJwt {
            subject: "hostile-subject".into(),
            lifetime: Duration::from_secs(60),
        })),
        _ => c.sasl_credentials(SCRAM_USER, SCRAM_PASSWORD),
    }
}

/// Connects with `mechanism` against a broker telling `lie` (none: the
/// honest exchange); returns the error, unwrapped from
/// `NoBrokerAvailable`, after checking what every SASL failure must say.
async fn refusal(mechanism: SaslMechanism, lie: SaslLie) -> Error {
    let b = HostileBroker::with(ApiKey::SaslAuthenticate, Fault::Sasl(lie)).await;
    let started = tokio::time::Instant::now();
    let err = within_setup("connect", Cluster::connect(config(&b, mechanism)))
        .await
        .expect_err(&format!("{mechanism} {lie:?}: connect must fail"));
    assert!(
        started.elapsed() < SETUP_TIMEOUT,
        "{mechanism} {lie:?}: refused within {SETUP_TIMEOUT:?}, took {:?}",
        started.elapsed()
    );
    let text = err.to_string();
    let inner = match err {
        Error::NoBrokerAvailable { last, .. } => *last,
        other => other,
    };
    assert!(
        matches!(&inner, Error::Authentication { mechanism: m, .. } if m == mechanism.name()),
        "{mechanism} {lie:?}: {inner:?}"
    );
    assert!(!inner.is_retriable(), "{mechanism} {lie:?}: {inner}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", b.port)),
        "{mechanism} {lie:?}: names the broker: {text}"
    );
    assert!(
        !text.contains(SCRAM_PASSWORD) && !text.contains("eyJ"),
        "{mechanism} {lie:?}: no secret in the message: {text}"
    );
    assert!(
        b.count(ApiKey::SaslAuthenticate) >= 1,
        "{mechanism} {lie:?}: the exchange went over the wire"
    );
    inner
}

fn reason(err: &Error) -> &str {
    match err {
        Error::Authentication { reason, .. } => reason,
        _ => unreachable!("checked by refusal()"),
    }
}

/// Control: the fake's SCRAM server (both hashes) and OAUTHBEARER accept
/// an honest client, so the lies below fail for the lie alone.
#[tokio::test]
async fn honest_scram_and_oauthbearer_exchanges_authenticate() {
    for mechanism in [
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::OAuthBearer,
    ] {
        let b = HostileBroker::start().await;
        within_setup("connect", Cluster::connect(config(&b, mechanism)))
            .await
            .unwrap_or_else(|e| panic!("honest {mechanism}: {e}"));
        let rounds = if mechanism == SaslMechanism::OAuthBearer {
            1
        } else {
            2
        };
        assert_eq!(
            b.count(ApiKey::SaslAuthenticate),
            rounds,
            "{mechanism}: SaslAuthenticate rounds"
        );
    }
}

/// Hostile SCRAM server-first and server-final messages: a nonce that
/// does not extend the client's, iteration counts below Kafka's minimum
/// and far above any real credential (refused before any hashing, so the
/// bound holds), a message cut after the nonce, a wrong server signature
/// (the server does not know the password) and a server error.
#[tokio::test]
async fn hostile_scram_servers_are_refused_with_the_reason() {
    let cases = [
        (SaslLie::ScramNonce, "nonce does not extend"),
        (SaslLie::ScramIterations(1), "below the minimum 4096"),
        (SaslLie::ScramIterations(u32::MAX), "above the maximum"),
        (SaslLie::ScramTruncated, "no salt"),
        (SaslLie::ScramSignature, "signature is wrong"),
        (SaslLie::ScramError, "server error: invalid-proof"),
    ];
    for mechanism in [SaslMechanism::ScramSha256, SaslMechanism::ScramSha512] {
        for (lie, why) in cases {
            let err = refusal(mechanism, lie).await;
            assert!(
                reason(&err).contains(why),
                "{mechanism} {lie:?}: says {why:?}: {err}"
            );
        }
    }
}

/// OAUTHBEARER's error path (RFC 7628 3.2.2): the broker answers the
/// token with an error challenge (`{"status":"invalid_token"}`); the
/// client acknowledges it with `%x01`. When the broker then refuses (what
/// Kafka does) the error carries its SASL_AUTHENTICATION_FAILED and the
/// challenge's status; when the broker instead claims success, the client
/// still fails, quoting the challenge.
#[tokio::test]
async fn an_oauthbearer_error_challenge_fails_the_connection() {
    let err = refusal(SaslMechanism::OAuthBearer, SaslLie::OAuthError).await;
    assert!(
        reason(&err).contains("SaslAuthenticationFailed") || reason(&err).contains("(58)"),
        "OAuthError: the broker's refusal: {err}"
    );
    assert!(
        reason(&err).contains("invalid_token"),
        "OAuthError: keeps the challenge's status: {err}"
    );
    let err = refusal(SaslMechanism::OAuthBearer, SaslLie::OAuthErrorThenSuccess).await;
    assert!(
        reason(&err).contains("invalid_token"),
        "OAuthErrorThenSuccess: quotes the challenge: {err}"
    );
}

/// Connects with PLAIN to a broker granting sessions of `lifetime_ms`
/// (KIP-368), checking one Metadata refresh works.
async fn session(lifetime_ms: i64) -> (HostileBroker, Cluster) {
    session_with(SaslMechanism::Plain, lifetime_ms).await
}

/// [`session`] with any mechanism. SCRAM's PBKDF2 in a debug build on
/// the loaded machine outlasted the 3 s `default.api.timeout.ms` that
/// bounds `connect` (once, at load average 22), so SCRAM and OAUTHBEARER
/// sessions get the set-up bound for it.
async fn session_with(mechanism: SaslMechanism, lifetime_ms: i64) -> (HostileBroker, Cluster) {
    let b = HostileBroker::start().await;
    b.session_lifetime_ms(lifetime_ms);
    let config = match mechanism {
        SaslMechanism::Plain => config(&b, mechanism),
        _ => builder(&b, mechanism)
            .default_api_timeout(SETUP_TIMEOUT)
            .build()
            .unwrap(),
    };
    let cluster = within_setup("connect", Cluster::connect(config))
        .await
        .unwrap_or_else(|e| panic!("{mechanism}, lifetime {lifetime_ms} ms: connect: {e}"));
    (b, cluster)
}

const TOPICS: [&str; 1] = ["hostile"];

/// Refreshes metadata until it fails or `within` passes; returns the
/// error, unwrapped from `NoBrokerAvailable`, and when it came.
async fn refresh_until_error(cluster: &Cluster, within: Duration) -> Option<(Error, Duration)> {
    let topics: Vec<String> = TOPICS.iter().map(|t| t.to_string()).collect();
    let started = Instant::now();
    while started.elapsed() < within {
        match within_setup("refresh", cluster.refresh_metadata(Some(&topics))).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(Error::NoBrokerAvailable { last, .. }) => return Some((*last, started.elapsed())),
            Err(e) => return Some((e, started.elapsed())),
        }
    }
    None
}

/// SASL re-authentication (KIP-368) against a hostile server. The client
/// closes a connection before the session lifetime the broker granted
/// ends (at 85-95% of it) and authenticates a new one; each hostile answer
/// to that second exchange must end typed and bounded:
/// - refused (SASL_AUTHENTICATION_FAILED): `Authentication{PLAIN}`, not
///   retriable, naming the broker, once the first session has ended;
/// - lost (no answer) or slow (one byte per 100 ms): a retriable error
///   naming the broker within the set-up bound, never a hang.
#[tokio::test]
async fn a_hostile_reauthentication_ends_typed_and_bounded() {
    let lifetime = Duration::from_millis(600);
    // Refused.
    let (b, cluster) = session(lifetime.as_millis() as i64).await;
    let handshakes = b.count(ApiKey::SaslHandshake);
    b.script(ApiKey::SaslAuthenticate, Fault::ErrorCode(58));
    let (err, after) = refresh_until_error(&cluster, SETUP_TIMEOUT)
        .await
        .expect("refused re-authentication: a refresh must fail once the session ends");
    eprintln!("re-auth refused: after {after:?}: {err:?}");
    assert!(
        matches!(&err, Error::Authentication { mechanism, .. } if mechanism == "PLAIN"),
        "re-auth refused: {err:?}"
    );
    assert!(!err.is_retriable(), "re-auth refused: {err}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{}", b.port)),
        "re-auth refused: names the broker: {err}"
    );
    assert!(
        after >= lifetime.mul_f64(0.8) && after < lifetime + SETUP_TIMEOUT,
        "re-auth refused: not before the session ends, and bounded: {after:?}"
    );
    assert!(
        b.count(ApiKey::SaslHandshake) > handshakes,
        "re-auth refused: a second exchange was started"
    );
    // Lost, and slow.
    for fault in [Fault::Silent, Fault::SlowDrip(Duration::from_millis(100))] {
        let (b, cluster) = session(lifetime.as_millis() as i64).await;
        b.script(ApiKey::SaslAuthenticate, fault.clone());
        let (err, after) = refresh_until_error(&cluster, SETUP_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("{fault:?}: a refresh must fail once the session ends"));
        eprintln!("re-auth {fault:?}: after {after:?}: {err:?}");
        assert!(
            err.is_retriable(),
            "{fault:?}: a lost answer is retriable: {err:?}"
        );
        assert!(
            err.to_string().contains(&format!("127.0.0.1:{}", b.port)),
            "{fault:?}: names the broker: {err}"
        );
        assert!(
            after < lifetime + SETUP_TIMEOUT,
            "{fault:?}: bounded by the session and the set-up bound: {after:?}"
        );
    }
}

/// Session lifetimes a broker should not grant (KIP-368's field is an
/// int64): 0 and negative mean no re-authentication, so the first
/// connection stays in use; `i64::MAX` ms must not overflow the client's
/// clock arithmetic; 1 ms expires every session at once, and the client
/// must neither panic nor spin (sessions are re-established for the
/// requests that need them) and end each call typed within the bound.
#[tokio::test]
async fn absurd_session_lifetimes_neither_panic_nor_spin() {
    let topics: Vec<String> = TOPICS.iter().map(|t| t.to_string()).collect();
    for lifetime_ms in [0, -5, i64::MAX] {
        let (b, cluster) = session(lifetime_ms).await;
        let handshakes = b.count(ApiKey::SaslHandshake);
        tokio::time::sleep(Duration::from_millis(500)).await;
        for _ in 0..3 {
            within_setup("refresh", cluster.refresh_metadata(Some(&topics)))
                .await
                .unwrap_or_else(|e| panic!("lifetime {lifetime_ms} ms: {e}"));
        }
        assert_eq!(
            b.count(ApiKey::SaslHandshake),
            handshakes,
            "lifetime {lifetime_ms} ms: the first connections stay in use"
        );
    }
    // 1 ms: every session ends at once. Refresh every 100 ms for 2 s.
    let b = HostileBroker::start().await;
    b.session_lifetime_ms(1);
    let cluster = within_setup(
        "connect",
        Cluster::connect(config(&b, SaslMechanism::Plain)),
    )
    .await
    .expect("lifetime 1 ms: connect");
    let started = Instant::now();
    let (mut ok, mut failed) = (0usize, Vec::new());
    while started.elapsed() < Duration::from_secs(2) {
        let call = Instant::now();
        match within_setup("refresh", cluster.refresh_metadata(Some(&topics))).await {
            Ok(_) => ok += 1,
            Err(e) => failed.push(e),
        }
        assert!(
            call.elapsed() < SETUP_TIMEOUT,
            "lifetime 1 ms: a refresh took {:?}",
            call.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refreshes = ok + failed.len();
    let handshakes = b.count(ApiKey::SaslHandshake);
    eprintln!(
        "lifetime 1 ms: {refreshes} refreshes in {:?}, {ok} ok, {} failed ({:?}); {handshakes} SASL handshakes",
        started.elapsed(),
        failed.len(),
        failed.first()
    );
    for e in &failed {
        assert!(
            e.to_string().contains("127.0.0.1"),
            "lifetime 1 ms: names the broker: {e}"
        );
    }
    // Sessions are re-established for the requests that need them, not in
    // a loop of their own: a few handshakes per refresh at most.
    assert!(
        handshakes >= 2,
        "lifetime 1 ms: the expired session was re-established ({handshakes} handshakes)"
    );
    assert!(
        handshakes <= 4 * refreshes + 2,
        "lifetime 1 ms: {handshakes} handshakes for {refreshes} refreshes is a reconnect loop"
    );
}

/// Scheduling slack on the loaded 2-core machine for a bound that is a sum
/// of configured timeouts.
const SLACK: Duration = Duration::from_secs(2);

/// KIP-368 re-authentication with `mechanism` against a hostile second
/// exchange (the broker grants 1.5 s sessions; the client opens a new,
/// authenticated connection at 85-95% of it; `default.api.timeout.ms` and
/// the set-up bound are 10 s). Each case: a second SaslHandshake is sent,
/// and the first refresh that fails does so no earlier than 80% of the
/// session after `connect` began, and within the session + the set-up
/// bound + 2 s of slack after the refresh loop began, naming the broker:
/// - refused (SASL_AUTHENTICATION_FAILED, 58), and the mechanism's own lie
///   (SCRAM: a server signature that does not verify; OAUTHBEARER: the
///   error challenge, then 58): `Authentication{mechanism}`, not
///   retriable, with the reason;
/// - lost (no answer) or slow (one byte per 100 ms): a retriable error.
async fn reauthentication_against(mechanism: SaslMechanism) {
    let lifetime = Duration::from_millis(1500);
    let (lie, why) = match mechanism {
        SaslMechanism::OAuthBearer => (SaslLie::OAuthError, "invalid_token"),
        _ => (SaslLie::ScramSignature, "signature is wrong"),
    };
    let cases = [
        (Fault::ErrorCode(58), Some("58")),
        (Fault::Sasl(lie), Some(why)),
        (Fault::Silent, None),
        (Fault::SlowDrip(Duration::from_millis(100)), None),
    ];
    for (fault, refused) in cases {
        let case = format!("{mechanism} re-auth {fault:?}");
        let connect_at = Instant::now();
        let (b, cluster) = session_with(mechanism, lifetime.as_millis() as i64).await;
        let handshakes = b.count(ApiKey::SaslHandshake);
        b.script(ApiKey::SaslAuthenticate, fault.clone());
        let (err, after) = refresh_until_error(&cluster, lifetime + SETUP_TIMEOUT)
            .await
            .unwrap_or_else(|| panic!("{case}: a refresh must fail once the session ends"));
        let since_connect = connect_at.elapsed();
        eprintln!("{case}: after {after:?} ({since_connect:?} since connect): {err:?}");
        assert!(
            b.count(ApiKey::SaslHandshake) > handshakes,
            "{case}: a second exchange was started"
        );
        assert!(
            since_connect >= lifetime.mul_f64(0.8),
            "{case}: not before the session ends: {since_connect:?}"
        );
        assert!(
            after < lifetime + SETUP_TIMEOUT + SLACK,
            "{case}: bounded by the session, then one refresh within the set-up bound: {after:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("127.0.0.1:{}", b.port)),
            "{case}: names the broker: {text}"
        );
        assert!(
            !text.contains(SCRAM_PASSWORD) && !text.contains("eyJ"),
            "{case}: no secret in the message: {text}"
        );
        match refused {
            Some(why) => {
                assert!(
                    matches!(&err, Error::Authentication { mechanism: m, .. } if m == mechanism.name()),
                    "{case}: {err:?}"
                );
                assert!(!err.is_retriable(), "{case}: {err}");
                assert!(text.contains(why), "{case}: says {why:?}: {text}");
            }
            None => assert!(
                err.is_retriable(),
                "{case}: a lost answer is retriable: {err:?}"
            ),
        }
    }
}

#[tokio::test]
async fn a_hostile_scram_sha_256_reauthentication_ends_typed_and_bounded() {
    reauthentication_against(SaslMechanism::ScramSha256).await;
}

#[tokio::test]
async fn a_hostile_scram_sha_512_reauthentication_ends_typed_and_bounded() {
    reauthentication_against(SaslMechanism::ScramSha512).await;
}

#[tokio::test]
async fn a_hostile_oauthbearer_reauthentication_ends_typed_and_bounded() {
    reauthentication_against(SaslMechanism::OAuthBearer).await;
}
