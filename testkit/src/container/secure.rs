//! Secure mode: SASL users and TLS material for a Kafka container.
//!
//! - Certificates: a test CA and a broker certificate, ECDSA P-256, made in
//!   pure Rust (rcgen for the X.509 structure without its ring/aws-lc
//!   backends, RustCrypto's p256 for the keys and signatures), so the testkit
//!   stays free of C. Kafka reads them as a PEM key store (KIP-651).
//! - SASL: PLAIN users and OAUTHBEARER (Kafka's unsecured JWT validator,
//!   tests only) come from the listeners' JAAS configuration; SCRAM
//!   credentials (KIP-554, AlterUserScramCredentials) are written through the
//!   PLAINTEXT listener once the broker serves, with the salted password
//!   computed here as RFC 5802's `Hi()`, which is PBKDF2-HMAC.
//! - ACLs: KIP-801's StandardAuthorizer; [`SECURE_USER`] and the broker's own
//!   PLAINTEXT listeners (ANONYMOUS) are super users; a resource without ACLs
//!   stays open. The same set-up as purekafka's `scripts/kafka up --secure`.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use hmac::Hmac;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::AlterUserScramCredentialsRequest;
use kafka_protocol::protocol::StrBytes;
use p256::ecdsa::signature::Signer;
use p256::pkcs8::{EncodePrivateKey, LineEnding};
use purekafka::cluster::Workload;
use purekafka::config::SaslMechanism;
use purekafka::protocol::versions::Versions;
use purekafka::{ClientConfig, Cluster};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, SignatureAlgorithm, SigningKey,
    PKCS_ECDSA_P256_SHA256,
};

use super::error::{Error, Result};
use super::image::{MTLS_PORT, SASL_PORT, TLS_PORT};

/// The user every SASL mechanism of a secure container knows.
pub const SECURE_USER: &str = "alice";
/// [`SECURE_USER`]'s password.
pub const SECURE_PASSWORD: &str = "alice-secret";
/// A second user, known to SCRAM only and no super user: what ACLs give it.
pub const SCRAM_USER: &str = "bob";
/// [`SCRAM_USER`]'s password.
pub const SCRAM_PASSWORD: &str = "bob-secret";
/// The DNS name the broker certificate holds besides 127.0.0.1 (and a
/// remote engine's host). `localhost` is deliberately absent, so dialling
/// it shows a host name mismatch.
pub const BROKER_DNS_NAME: &str = "broker.purekafka.test";

/// Where the broker's key store and trust store are copied in the container.
pub(crate) const KEYSTORE_PATH: &str = "/tmp/purekafka-tls/broker-keystore.pem";
pub(crate) const TRUSTSTORE_PATH: &str = "/tmp/purekafka-tls/ca.pem";

/// SCRAM iterations (Kafka's minimum is 4096).
const SCRAM_ITERATIONS: i32 = 4096;

/// The PEM files of a secure container.
#[derive(Debug, Clone)]
pub(crate) struct TlsMaterial {
    /// The test CA's certificate: what clients trust.
    pub ca_pem: String,
    /// Kafka's PEM key store: the broker's PKCS#8 key, its certificate, the CA.
    pub keystore_pem: String,
    /// A client certificate for the mTLS listener, and its PKCS#8 key.
    pub client_pem: String,
    pub client_key_pem: String,
}

/// An ECDSA P-256 key that rcgen can sign with.
struct P256Key {
    key: p256::ecdsa::SigningKey,
    public: Vec<u8>,
}

impl P256Key {
    fn generate() -> Result<P256Key> {
        // A random scalar; the rare value outside the curve order is redrawn.
        for _ in 0..16 {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| Error::Config {
                key: "secure",
                reason: format!("no randomness for a test key: {e}"),
            })?;
            if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&bytes) {
                let public = key
                    .verifying_key()
                    .to_encoded_point(false)
                    .as_bytes()
                    .to_vec();
                return Ok(P256Key { key, public });
            }
        }
        Err(Error::Config {
            key: "secure",
            reason: "could not draw a P-256 key".into(),
        })
    }

    fn pkcs8_pem(&self) -> Result<String> {
        self.key
            .to_pkcs8_pem(LineEnding::LF)
            .map(|s| s.to_string())
            .map_err(|e| Error::Config {
                key: "secure",
                reason: format!("encoding a test key: {e}"),
            })
    }
}

impl PublicKeyData for P256Key {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &PKCS_ECDSA_P256_SHA256
    }
}

impl SigningKey for P256Key {
    fn sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, rcgen::Error> {
        let sig: p256::ecdsa::Signature = self.key.sign(msg);
        Ok(sig.to_der().as_bytes().to_vec())
    }
}

/// A random positive 128-bit serial number (RFC 5280 4.1.2.2).
fn serial_number() -> Result<SerialNumber> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| Error::Config {
        key: "secure",
        reason: format!("no randomness for a serial number: {e}"),
    })?;
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok(SerialNumber::from_slice(&bytes))
}

fn cert_error(e: rcgen::Error) -> Error {
    Error::Config {
        key: "secure",
        reason: format!("making the test certificates: {e}"),
    }
}

/// A test CA and a broker certificate valid for `hosts` (IP addresses and
/// DNS names).
pub(crate) fn tls_material(hosts: &[String]) -> Result<TlsMaterial> {
    let ca_key = P256Key::generate()?;
    let mut ca_params = CertificateParams::default();
    let mut ca_name = DistinguishedName::new();
    ca_name.push(DnType::CommonName, "purekafka-testkit CA");
    ca_params.distinguished_name = ca_name;
    ca_params.serial_number = Some(serial_number()?);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(cert_error)?;
    let ca = Issuer::new(ca_params, ca_key);

    let broker_key = P256Key::generate()?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "purekafka-testkit broker");
    params.distinguished_name = name;
    params.serial_number = Some(serial_number()?);
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.subject_alt_names = hosts
        .iter()
        .map(|h| match h.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => h.clone().try_into().map(SanType::DnsName),
        })
        .collect::<std::result::Result<_, _>>()
        .map_err(cert_error)?;
    let broker_cert = params.signed_by(&broker_key, &ca).map_err(cert_error)?;

    let client_key = P256Key::generate()?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "purekafka-testkit client");
    params.distinguished_name = name;
    params.serial_number = Some(serial_number()?);
    params.is_ca = IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = params.signed_by(&client_key, &ca).map_err(cert_error)?;

    let ca_pem = ca_cert.pem();
    let keystore_pem = format!("{}{}{}", broker_key.pkcs8_pem()?, broker_cert.pem(), ca_pem);
    Ok(TlsMaterial {
        ca_pem,
        keystore_pem,
        client_pem: client_cert.pem(),
        client_key_pem: client_key.pkcs8_pem()?,
    })
}

/// The broker settings of the secure listeners: `SASL` (SASL_PLAINTEXT) and
/// `TLS` (SASL_SSL) with mechanisms PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and
/// OAUTHBEARER; `MTLS` (SSL, client certificate required); ACLs enforced.
/// Listener names avoid `SSL://` and `SASL_`: apache/kafka's entrypoint then
/// leaves key stores to these properties instead of its JKS conventions.
pub(crate) fn broker_env(env: &mut BTreeMap<String, String>) {
    let plain = format!(
        "org.apache.kafka.common.security.plain.PlainLoginModule required user_{SECURE_USER}=\"{SECURE_PASSWORD}\";"
    );
    let scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;";
    let oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"admin\";";
    let mut set = |k: &str, v: &str| {
        env.insert(k.to_owned(), v.to_owned());
    };
    set(
        "KAFKA_SASL_ENABLED_MECHANISMS",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    );
    for listener in ["SASL", "TLS"] {
        let p = format!("KAFKA_LISTENER_NAME_{listener}");
        set(&format!("{p}_PLAIN_SASL_JAAS_CONFIG"), &plain);
        set(&format!("{p}_SCRAM___SHA___256_SASL_JAAS_CONFIG"), scram);
        set(&format!("{p}_SCRAM___SHA___512_SASL_JAAS_CONFIG"), scram);
        set(&format!("{p}_OAUTHBEARER_SASL_JAAS_CONFIG"), oauth);
    }
    for listener in ["TLS", "MTLS"] {
        let p = format!("KAFKA_LISTENER_NAME_{listener}");
        set(&format!("{p}_SSL_KEYSTORE_TYPE"), "PEM");
        set(&format!("{p}_SSL_KEYSTORE_LOCATION"), KEYSTORE_PATH);
        set(&format!("{p}_SSL_TRUSTSTORE_TYPE"), "PEM");
        set(&format!("{p}_SSL_TRUSTSTORE_LOCATION"), TRUSTSTORE_PATH);
    }
    set("KAFKA_LISTENER_NAME_MTLS_SSL_CLIENT_AUTH", "required");
    // KIP-368: sessions get a lifetime; a connection used past it is closed.
    set("KAFKA_CONNECTIONS_MAX_REAUTH_MS", "600000");
    set(
        "KAFKA_AUTHORIZER_CLASS_NAME",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    );
    set(
        "KAFKA_SUPER_USERS",
        &format!("User:ANONYMOUS;User:{SECURE_USER}"),
    );
    set("KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true");
}

/// The secure listeners: name, container port, security protocol.
pub(crate) const SECURE_LISTENERS: [(&str, u16, &str); 3] = [
    ("SASL", SASL_PORT, "SASL_PLAINTEXT"),
    ("TLS", TLS_PORT, "SASL_SSL"),
    ("MTLS", MTLS_PORT, "SSL"),
];

fn salted_password(mechanism: SaslMechanism, password: &str, salt: &[u8]) -> Vec<u8> {
    match mechanism {
        SaslMechanism::ScramSha512 => {
            let mut out = [0u8; 64];
            pbkdf2::pbkdf2::<Hmac<sha2::Sha512>>(
                password.as_bytes(),
                salt,
                SCRAM_ITERATIONS as u32,
                &mut out,
            )
            .map(|()| out.to_vec())
            .unwrap_or_default()
        }
        _ => {
            let mut out = [0u8; 32];
            pbkdf2::pbkdf2::<Hmac<sha2::Sha256>>(
                password.as_bytes(),
                salt,
                SCRAM_ITERATIONS as u32,
                &mut out,
            )
            .map(|()| out.to_vec())
            .unwrap_or_default()
        }
    }
}

/// Writes the SCRAM-SHA-256 and SCRAM-SHA-512 credentials of
/// [`SECURE_USER`] and [`SCRAM_USER`] through the PLAINTEXT listener at
/// `bootstrap`.
pub(crate) async fn create_scram_users(bootstrap: &str) -> Result<()> {
    let config = ClientConfig::builder()
        .bootstrap_servers(bootstrap)
        .client_id("purekafka-testkit")
        .request_timeout(Duration::from_secs(10))
        .default_api_timeout(Duration::from_secs(15))
        .build()?;
    let cluster = Cluster::connect(config).await?;
    let conn = cluster.any_connection(Workload::Admin).await?;
    // One request per mechanism: Kafka refuses a user named twice in one
    // request (DUPLICATE_RESOURCE).
    for (mechanism, code) in [
        (SaslMechanism::ScramSha256, 1),
        (SaslMechanism::ScramSha512, 2),
    ] {
        let mut upsertions = Vec::new();
        for (user, password) in [(SECURE_USER, SECURE_PASSWORD), (SCRAM_USER, SCRAM_PASSWORD)] {
            let mut salt = [0u8; 16];
            getrandom::fill(&mut salt).map_err(|e| Error::Config {
                key: "secure",
                reason: format!("no randomness for a SCRAM salt: {e}"),
            })?;
            upsertions.push(
                ScramCredentialUpsertion::default()
                    .with_name(StrBytes::from_static_str(user))
                    .with_mechanism(code)
                    .with_iterations(SCRAM_ITERATIONS)
                    .with_salt(Bytes::copy_from_slice(&salt))
                    .with_salted_password(Bytes::from(salted_password(mechanism, password, &salt))),
            );
        }
        let req = AlterUserScramCredentialsRequest::default().with_upsertions(upsertions);
        let resp = conn.send(&req, Versions::new(0, 0)).await?;
        if let Some(r) = resp.results.iter().find(|r| r.error_code != 0) {
            return Err(Error::Config {
                key: "secure",
                reason: format!(
                    "AlterUserScramCredentials ({}) for {} on {bootstrap} failed: error {} {}",
                    mechanism.name(),
                    r.user.as_str(),
                    r.error_code,
                    r.error_message.as_deref().unwrap_or("")
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_store_holds_a_pkcs8_key_then_the_chain() {
        let m = tls_material(&["127.0.0.1".into(), "localhost".into()]).expect("certificates");
        assert!(m.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(m.keystore_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_eq!(m.keystore_pem.matches("BEGIN CERTIFICATE").count(), 2);
        assert!(m.keystore_pem.ends_with(&m.ca_pem));
        assert!(m.client_key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert!(m.client_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    }

    #[test]
    fn a_host_name_that_is_not_ascii_is_refused() {
        // A DNS name in a certificate is IA5 (ASCII) text.
        assert!(tls_material(&["brøker.example".into()]).is_err());
    }

    #[test]
    fn salted_passwords_reproduce_rfc7677s_server_signature() {
        // RFC 7677's SCRAM-SHA-256 exchange: user "user", password "pencil".
        // ServerSignature = HMAC(HMAC(SaltedPassword, "Server Key"), AuthMessage)
        // must equal the RFC's "v=" value, which holds only if SaltedPassword is right.
        use base64::Engine;
        use hmac::Mac;
        let b64 = base64::engine::general_purpose::STANDARD;
        let salt = b64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("salt");
        let salted = salted_password(SaslMechanism::ScramSha256, "pencil", &salt);
        let hmac = |key: &[u8], msg: &[u8]| {
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
            mac.update(msg);
            mac.finalize().into_bytes().to_vec()
        };
        let server_key = hmac(&salted, b"Server Key");
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
            r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
            c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        assert_eq!(
            b64.encode(hmac(&server_key, auth_message.as_bytes())),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        assert_eq!(
            salted_password(SaslMechanism::ScramSha512, "pencil", &salt).len(),
            64
        );
    }

    #[test]
    fn both_sasl_listeners_get_every_mechanism() {
        let mut env = BTreeMap::new();
        broker_env(&mut env);
        assert_eq!(env["KAFKA_LISTENER_NAME_MTLS_SSL_CLIENT_AUTH"], "required");
        for l in ["SASL", "TLS"] {
            assert!(env.contains_key(&format!(
                "KAFKA_LISTENER_NAME_{l}_OAUTHBEARER_SASL_JAAS_CONFIG"
            )));
            assert!(env.contains_key(&format!("KAFKA_LISTENER_NAME_{l}_PLAIN_SASL_JAAS_CONFIG")));
            assert!(env.contains_key(&format!(
                "KAFKA_LISTENER_NAME_{l}_SCRAM___SHA___512_SASL_JAAS_CONFIG"
            )));
        }
        assert!(env["KAFKA_LISTENER_NAME_SASL_PLAIN_SASL_JAAS_CONFIG"]
            .contains("user_alice=\"alice-secret\""));
    }
}
