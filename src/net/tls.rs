//! TLS transport for `SSL` and `SASL_SSL` (feature `tls`): rustls with the
//! graviola crypto provider, which is pure Rust, so the `tls` build needs no
//! C compiler either.
//!
//! Verification is on by default: the broker's chain must lead to a trusted
//! root (the bundled Mozilla roots, or `ssl.ca.location`) and name the host
//! dialled (`ssl.endpoint.identification.algorithm=https`, as the Java
//! client; empty turns only the name check off). SNI is sent for DNS names.
//! mTLS: `ssl.certificate.location` and `ssl.key.location` (PEM), the key
//! optionally encrypted (PKCS#8 PBES2, `ssl.key.password`); the Java
//! client's PEM store keys (KIP-651: `ssl.truststore.location`,
//! `ssl.keystore.location` with type PEM) map onto these.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::sasl::Secret;
use super::security::TlsConfig;
use crate::error::{Error, Origin, Result};

/// Runs the TLS handshake on `tcp` for `host`.
pub(crate) async fn connect(
    tcp: TcpStream,
    host: &str,
    cfg: &TlsConfig,
    label: &Origin,
) -> Result<TlsStream<TcpStream>> {
    let config = client_config(cfg)?;
    let name = ServerName::try_from(host.to_owned()).map_err(|_| {
        Error::config(
            "bootstrap.servers",
            format!("`{host}` is not a valid TLS server name"),
        )
    })?;
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| Error::Tls {
            broker: label.clone(),
            reason: e.to_string(),
        })
}

/// The rustls client config for `cfg`.
pub fn client_config(cfg: &TlsConfig) -> Result<rustls::ClientConfig> {
    let provider = Arc::new(rustls_graviola::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config("security.protocol", format!("TLS setup: {e}")))?;
    let mut roots = RootCertStore::empty();
    match &cfg.ca_location {
        Some(path) => {
            let certs = read_certs(path, "ssl.ca.location")?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(Error::config(
                    "ssl.ca.location",
                    format!("{} holds no usable CA certificate", path.display()),
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| Error::config("ssl.ca.location", format!("TLS trust setup: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = if cfg.danger_skip_verification {
        tracing::warn!("purekafka.ssl.danger.skip.certificate.verification=true: broker certificates are NOT verified");
        Arc::new(Unverified { provider })
    } else if !cfg.verify_hostname {
        Arc::new(AnyHostName { inner: webpki })
    } else {
        webpki
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&cfg.certificate_location, &cfg.key_location) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert, "ssl.certificate.location")?;
            let key = read_key(key, cfg.key_password.as_ref())?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::config("ssl.key.location", format!("client certificate: {e}")))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// The client's private key: plain PEM (PKCS#8, PKCS#1 or SEC1), or an
/// encrypted PKCS#8 key (PBES2) opened with `ssl.key.password`.
fn read_key(path: &Path, password: Option<&Secret>) -> Result<PrivateKeyDer<'static>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config("ssl.key.location", format!("{}: {e}", path.display())))?;
    if !text.contains(ENCRYPTED_KEY_LABEL) {
        if text.contains("Proc-Type: 4,ENCRYPTED") {
            return Err(Error::config(
                "ssl.key.location",
                format!(
                    "{}: legacy OpenSSL key encryption is not supported; convert it to an \
                     encrypted PKCS#8 key with `openssl pkcs8 -topk8 -v2 aes-256-cbc`",
                    path.display()
                ),
            ));
        }
        return PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| {
            Error::config(
                "ssl.key.location",
                format!("{}: no PEM private key ({e})", path.display()),
            )
        });
    }
    let Some(password) = password else {
        return Err(Error::config(
            "ssl.key.password",
            format!(
                "{} holds an encrypted key; set ssl.key.password",
                path.display()
            ),
        ));
    };
    let bad =
        |what: String| Error::config("ssl.key.location", format!("{}: {what}", path.display()));
    // The key may share its file with the certificate chain (a PEM
    // keystore): decode its own section only.
    let section = text
        .find(ENCRYPTED_KEY_LABEL)
        .and_then(|start| {
            let end = text[start..].find(ENCRYPTED_KEY_END)? + start + ENCRYPTED_KEY_END.len();
            Some(&text[start..end])
        })
        .ok_or_else(|| bad("unterminated ENCRYPTED PRIVATE KEY section".into()))?;
    let (_, der) = pkcs8::Document::from_pem(section).map_err(|e| bad(format!("PEM: {e}")))?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_bytes())
        .map_err(|e| bad(format!("encrypted key: {e}")))?;
    let plain = info.decrypt(password.expose()).map_err(|_| {
        Error::config(
            "ssl.key.password",
            format!(
                "cannot decrypt {}: wrong password or unsupported encryption",
                path.display()
            ),
        )
    })?;
    Ok(PrivateKeyDer::Pkcs8(plain.as_bytes().to_vec().into()))
}

const ENCRYPTED_KEY_LABEL: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_KEY_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::config(key, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::config(
            key,
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(certs)
}

/// Chain verified, host name not (`ssl.endpoint.identification.algorithm=`).
#[derive(Debug)]
struct AnyHostName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts any certificate (the handshake signatures are still checked).
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/net/testdata")
            .join(name)
    }

    fn config_key(err: Error) -> String {
        match err {
            Error::Config { key, .. } => key,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn an_encrypted_pkcs8_key_opens_with_its_password_and_only_with_it() {
        let plain = read_key(&testdata("client-key.pem"), None).unwrap();
        let encrypted = testdata("client-key-encrypted.pem");
        let opened = read_key(&encrypted, Some(&Secret::new("fixture-password"))).unwrap();
        assert_eq!(opened.secret_der(), plain.secret_der());
        let missing = read_key(&encrypted, None).expect_err("no password");
        assert_eq!(config_key(missing), "ssl.key.password");
        let wrong = read_key(&encrypted, Some(&Secret::new("not-it"))).expect_err("wrong password");
        let text = wrong.to_string();
        assert!(!text.contains("not-it"), "{text}");
        assert_eq!(config_key(wrong), "ssl.key.password");
    }
}
