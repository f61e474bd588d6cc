//! TLS transport (feature `tls`).
