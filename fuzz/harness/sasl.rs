//! SASL server messages: the SCRAM server-first-message (checked against a
//! fixed client nonce) and server-final-message parsers.
//! SaslHandshake and SaslAuthenticate frames are in the `responses` target.

use purekafka::net::sasl::scram::{
    parse_server_final, parse_server_first, MAX_ITERATIONS, MIN_ITERATIONS,
};

/// The RFC 7677 example nonce, so the fuzzer can learn to extend it.
const CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";

/// One input: a selector byte (even: server-first, odd: server-final),
/// then the message.
pub fn run(data: &[u8]) {
    let Some((&selector, message)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        if let Ok(first) = parse_server_first(message, CLIENT_NONCE) {
            assert!(first.nonce.len() > CLIENT_NONCE.len());
            assert!(first.nonce.starts_with(CLIENT_NONCE));
            assert!((MIN_ITERATIONS..=MAX_ITERATIONS).contains(&first.iterations));
        }
    } else {
        let _ = parse_server_final(message);
    }
}
