//! Every decompressor on arbitrary bytes, with a 1 MiB output cap.

use purekafka::protocol::compression::{decompress, Compression};

/// One input: a codec selector byte, then the compressed bytes.
pub fn run(data: &[u8]) {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let codec = Compression::ALL[usize::from(selector) % Compression::ALL.len()];
    if let Ok(out) = decompress(codec, input, 1 << 20) {
        assert!(out.len() <= 1 << 20, "{codec} exceeded its output cap");
    }
}
