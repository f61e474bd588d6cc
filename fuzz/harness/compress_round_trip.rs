//! Every compressor at every kind of level (KIP-390) on arbitrary bytes:
//! the output must decompress, within a cap of exactly the input's size, to
//! the input.

use bytes::BytesMut;
use purekafka::protocol::compression::{compress, decompress, Compression};

/// Levels tried per codec, picked by the second byte (`None`: default).
fn level(codec: Compression, selector: u8) -> Option<i32> {
    let choices: &[Option<i32>] = match codec {
        Compression::Gzip => &[None, Some(-1), Some(1), Some(9)],
        Compression::Lz4 => &[None, Some(1), Some(17)],
        Compression::Zstd => &[
            None,
            Some(-131_072),
            Some(-1),
            Some(0),
            Some(1),
            Some(3),
            Some(9),
            Some(19),
            Some(22),
        ],
        _ => &[None],
    };
    choices[usize::from(selector) % choices.len()]
}

/// One input: a codec selector byte, a level selector byte, then the data
/// (at most 64 KiB of it, to keep the slow levels quick).
pub fn run(data: &[u8]) {
    let [codec, level_selector, rest @ ..] = data else {
        return;
    };
    let input = &rest[..rest.len().min(64 << 10)];
    let codec = Compression::ALL[usize::from(*codec) % Compression::ALL.len()];
    let level = level(codec, *level_selector);
    let mut out = BytesMut::new();
    compress(codec, level, input, &mut out)
        .unwrap_or_else(|e| panic!("{codec} level {level:?} failed to compress: {e}"));
    let back = decompress(codec, &out, input.len())
        .unwrap_or_else(|e| panic!("{codec} level {level:?} did not round-trip: {e}"));
    assert_eq!(&back[..], input, "{codec} level {level:?} changed the data");
}
