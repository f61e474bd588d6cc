//! Record batch v2 decoding of arbitrary bytes: errors, never panics, never
//! allocates past the decompression budget. Covers both ways in: the
//! all-at-once `decode_batches`, and the consumer's way (`BatchIter`, one
//! `RawBatch::decode` per batch, control records parsed as transaction
//! markers).

use bytes::Bytes;
use purekafka::protocol::records::{decode_batches, BatchIter, ControlRecord, DecodeLimits};

const BUDGET: usize = 1 << 20;

/// One input: the bytes of a fetched partition's records.
pub fn run(data: &[u8]) {
    let data = Bytes::copy_from_slice(data);
    for check_crc in [true, false] {
        let limits = DecodeLimits {
            check_crc,
            max_decompressed_size: BUDGET,
        };
        let _ = decode_batches(data.clone(), &limits);
    }
    let limits = DecodeLimits {
        check_crc: false,
        max_decompressed_size: BUDGET,
    };
    for raw in BatchIter::new(data) {
        let Ok(raw) = raw else { break };
        let _ = raw.header().next_offset();
        let _ = raw.verify_crc();
        let Ok(batch) = raw.decode(&limits) else {
            continue;
        };
        if batch.is_control() {
            for r in &batch.records {
                let _ = ControlRecord::parse(r);
            }
        }
    }
}
