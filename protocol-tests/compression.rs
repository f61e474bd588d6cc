//! Compression codecs: round trips, bounds and garbage for every codec.

use bytes::BytesMut;
use proptest::prelude::*;
use purekafka::protocol::compression::{compress, decompress, Compression};
use purekafka::protocol::ProtocolError;

fn codec() -> impl Strategy<Value = Compression> {
    proptest::sample::select(Compression::ALL.to_vec())
}

fn compressed(codec: Compression, data: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    compress(codec, None, data, &mut out).expect("compress");
    out
}

#[test]
fn bombs_are_bounded_in_every_codec() {
    // 64 MiB of zeros compresses to a few KiB or less in every real codec.
    let data = vec![0u8; 64 << 20];
    for codec in Compression::ALL {
        let packed = compressed(codec, &data);
        let err = decompress(codec, &packed, 1 << 20).unwrap_err();
        assert!(
            matches!(err, ProtocolError::TooLarge { .. }),
            "{codec}: {err}"
        );
    }
}

#[test]
fn gzip_levels_are_honoured() {
    let data: Vec<u8> = (0..100_000u32)
        .map(|i| (i % 251) as u8 ^ (i / 997) as u8)
        .collect();
    let sizes: Vec<usize> = [1, 9]
        .iter()
        .map(|&level| {
            let mut out = BytesMut::new();
            compress(Compression::Gzip, Some(level), &data, &mut out).unwrap();
            assert_eq!(
                decompress(Compression::Gzip, &out, data.len()).unwrap(),
                data
            );
            out.len()
        })
        .collect();
    assert!(sizes[1] <= sizes[0], "{sizes:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn round_trip(codec in codec(), data in proptest::collection::vec(any::<u8>(), 0..4096), level in proptest::option::of(1i32..=9)) {
        let level = level.filter(|_| codec.validate_level(level).is_ok());
        let mut out = BytesMut::new();
        compress(codec, level, &data, &mut out).unwrap();
        prop_assert_eq!(decompress(codec, &out, data.len()).unwrap(), data);
    }

    #[test]
    fn compressible_round_trip(codec in codec(), seed in any::<u8>(), len in 0usize..200_000) {
        let data: Vec<u8> = (0..len).map(|i| seed.wrapping_add((i / 64) as u8)).collect();
        let out = compressed(codec, &data);
        prop_assert_eq!(decompress(codec, &out, data.len()).unwrap(), data.clone());
        if !data.is_empty() {
            let err = decompress(codec, &out, data.len() - 1).unwrap_err();
            let too_large = matches!(err, ProtocolError::TooLarge { .. });
            prop_assert!(too_large);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(codec in codec(), data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decompress(codec, &data, 1 << 20);
    }

    #[test]
    fn corrupted_streams_never_panic(
        codec in codec(),
        data in proptest::collection::vec(0u8..4, 0..4096),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<proptest::sample::Index>(),
    ) {
        let mut packed = compressed(codec, &data).to_vec();
        if packed.is_empty() {
            return Ok(());
        }
        for (at, xor) in flips {
            let i = at.index(packed.len());
            packed[i] ^= xor;
        }
        let _ = decompress(codec, &packed, 1 << 20);
        let _ = decompress(codec, &packed[..cut.index(packed.len())], 1 << 20);
    }
}
