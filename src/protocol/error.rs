//! Errors raised while encoding or decoding bytes of the Kafka protocol.

/// A failure to encode or decode protocol bytes.
///
/// Decode errors mean the peer sent bytes we cannot trust; the connection that
/// carried them should be dropped. None of them is retriable on the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The input ended before a complete value could be read.
    #[error("truncated {what}: need {needed} bytes, {available} available")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// A value was read but is not valid where it appears.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// What was being read.
        what: &'static str,
        /// Why it is invalid.
        reason: String,
    },
    /// A record batch failed its CRC-32C check.
    #[error("CRC mismatch in record batch at base offset {base_offset}: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// Base offset of the batch.
        base_offset: i64,
        /// CRC stored in the batch.
        stored: u32,
        /// CRC computed over the batch.
        computed: u32,
    },
    /// A size is beyond a configured bound (frame size, decompressed size, ...).
    #[error("{what} of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size (or claimed size).
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// A valid value that this implementation does not support.
    #[error("unsupported {what}: {value}")]
    Unsupported {
        /// What was read.
        what: &'static str,
        /// The value.
        value: i64,
    },
    /// Encoding failed.
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
}
