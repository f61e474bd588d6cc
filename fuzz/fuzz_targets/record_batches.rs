//! Record batch v2 decoding of arbitrary bytes: errors, never panics, never
//! allocates past the decompression budget.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use purekafka::protocol::records::{decode_batches, DecodeLimits};

fuzz_target!(|data: &[u8]| {
    for check_crc in [true, false] {
        let limits = DecodeLimits {
            check_crc,
            max_decompressed_size: 1 << 20,
        };
        let _ = decode_batches(Bytes::copy_from_slice(data), &limits);
    }
});
