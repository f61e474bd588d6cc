//! How connections are secured: `security.protocol` and the settings of its
//! TLS and SASL layers. The layers themselves live in module `tls` (feature `tls`) and
//! [`super::sasl`].

use std::path::PathBuf;

use super::sasl::{SaslConfig, Secret};

/// `security.protocol`: which layers wrap a broker connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SecurityProtocol {
    /// No TLS, no SASL (the default).
    #[default]
    Plaintext,
    /// TLS only (needs the `tls` feature).
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS (needs the `tls` feature).
    SaslSsl,
}

impl SecurityProtocol {
    /// The Kafka spelling (`SASL_SSL`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Parses the Kafka spelling (case-insensitive).
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether the connection runs over TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether the connection authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// TLS settings (`ssl.*`), used when `security.protocol` is `SSL` or
/// `SASL_SSL`. Certificate verification and host name verification are on
/// by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// `ssl.ca.location`: PEM file of CA certificates to trust instead of
    /// the bundled Mozilla roots.
    pub ca_location: Option<PathBuf>,
    /// `ssl.certificate.location`: PEM client certificate chain (mTLS).
    pub certificate_location: Option<PathBuf>,
    /// `ssl.key.location`: PEM private key of the client certificate (mTLS).
    pub key_location: Option<PathBuf>,
    /// `ssl.key.password`: decrypts an encrypted PKCS#8 key
    /// (`ENCRYPTED PRIVATE KEY`, PBES2) at `key_location`.
    pub key_password: Option<Secret>,
    /// `ssl.endpoint.identification.algorithm`: `https` (default) checks
    /// that the broker's certificate names the host dialled; empty turns the
    /// check off (the certificate chain is still verified).
    pub verify_hostname: bool,
    /// `purekafka.ssl.danger.skip.certificate.verification`: accept any
    /// broker certificate. Only for debugging: it allows anyone on the path
    /// to read and change the traffic.
    pub danger_skip_verification: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            ca_location: None,
            certificate_location: None,
            key_location: None,
            key_password: None,
            verify_hostname: true,
            danger_skip_verification: false,
        }
    }
}

/// Everything about securing a connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityConfig {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// SASL settings (used with `SASL_*` protocols).
    pub sasl: SaslConfig,
    /// TLS settings (used with `SSL` and `SASL_SSL`).
    pub tls: TlsConfig,
}
