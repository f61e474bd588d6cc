//! Compression codecs for record batches, all pure Rust.
//!
//! A record batch v2 (KIP-98) stores its codec in bits 0-2 of the batch
//! attributes and compresses the records section as one stream. The codecs
//! and their wire framings are:
//!
//! | codec  | code | framing                                               | crate      |
//! |--------|------|-------------------------------------------------------|------------|
//! | gzip   | 1    | RFC 1952 gzip members (several members accepted)      | `flate2`   |
//! | snappy | 2    | xerial `SnappyOutputStream` framing; raw blocks also decoded | `snap` |
//! | lz4    | 3    | standard LZ4 frame, correct header checksum (KIP-57) | `lz4_flex` |
//! | zstd   | 4    | standard zstd frames (KIP-110)                        | `structured-zstd` (encode), `ruzstd` (decode) |
//!
//! Compression levels (KIP-390) are validated against Kafka's ranges; what each
//! backend honours is documented on [`Compression::validate_level`].
//!
//! Decompression is bounded: [`decompress`] never produces more than
//! `max_size` bytes and fails with [`ProtocolError::TooLarge`] as soon as the
//! output would exceed it. Size headers in the compressed stream are checked
//! against the bound before any buffer is sized from them. Beyond the output
//! buffer, a decoder may hold a fixed working set: at most 8 MiB for lz4 (the
//! largest LZ4 block size), and for zstd a window of at most
//! `max(max_size, 8 MiB)`, checked from the frame header before decoding.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use bytes::{Bytes, BytesMut};

use super::ProtocolError;

mod gzip;
mod lz4;
mod snappy;
mod zstd;

/// A record batch compression codec, as stored in the batch attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compression {
    /// No compression (code 0).
    #[default]
    None,
    /// gzip (code 1).
    Gzip,
    /// Snappy with xerial framing (code 2).
    Snappy,
    /// LZ4 frame format (code 3).
    Lz4,
    /// Zstandard (code 4).
    Zstd,
}

/// Mask of the codec bits in record batch attributes.
const CODEC_MASK: i16 = 0x07;

impl Compression {
    /// Every codec, in code order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec encoded in bits 0-2 of record batch `attributes`.
    ///
    /// Codes 5-7 are reserved by Kafka and give [`ProtocolError::Unsupported`].
    pub fn from_attributes(attributes: i16) -> Result<Self, ProtocolError> {
        match attributes & CODEC_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(ProtocolError::Unsupported {
                what: "compression codec",
                value: i64::from(other),
            }),
        }
    }

    /// The attribute code of this codec (0..=4).
    pub fn code(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The codec's name in Kafka's `compression.type` setting.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Checks a compression level for this codec (`None` means the default).
    ///
    /// Accepted ranges follow Kafka's `compression.<codec>.level` settings
    /// (KIP-390); what is honoured depends on the pure-Rust backend:
    ///
    /// - gzip: 1..=9, or -1 for the default (6). Fully honoured.
    /// - lz4: 1..=17 (default 9). Accepted for compatibility, but `lz4_flex`
    ///   has a single fast compressor, so every level gives the same output.
    /// - zstd: -131072..=22 (default 3; 0 also means 3, as in zstd).
    ///   Fully honoured (`structured-zstd` implements every level).
    /// - none, snappy: no levels; `Some(_)` is rejected.
    pub fn validate_level(self, level: Option<i32>) -> Result<(), ProtocolError> {
        let Some(level) = level else { return Ok(()) };
        let ok = match self {
            Compression::Gzip => level == -1 || (1..=9).contains(&level),
            Compression::Lz4 => (1..=17).contains(&level),
            Compression::Zstd => (-131_072..=22).contains(&level),
            Compression::None | Compression::Snappy => false,
        };
        if ok {
            Ok(())
        } else {
            Err(ProtocolError::Encode {
                what: "compression level",
                reason: format!("level {level} is not valid for {self}"),
            })
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error from parsing a `compression.type` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compression.type {0:?}: expected none, gzip, snappy, lz4 or zstd")]
pub struct UnknownCompression(pub String);

impl FromStr for Compression {
    type Err = UnknownCompression;

    /// Parses Kafka's `compression.type` names, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownCompression(s.to_owned()))
    }
}

/// Compresses `input` with `codec` at `level` (`None` = codec default),
/// appending the compressed stream to `out`.
pub fn compress(
    codec: Compression,
    level: Option<i32>,
    input: &[u8],
    out: &mut BytesMut,
) -> Result<(), ProtocolError> {
    codec.validate_level(level)?;
    match codec {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => gzip::compress(level, input, out),
        Compression::Snappy => snappy::compress(input, out),
        Compression::Lz4 => lz4::compress(input, out),
        Compression::Zstd => zstd::compress(level, input, out),
    }
}

/// Decompresses `input` compressed with `codec`, producing at most `max_size`
/// bytes; a larger output fails with [`ProtocolError::TooLarge`].
pub fn decompress(
    codec: Compression,
    input: &[u8],
    max_size: usize,
) -> Result<Bytes, ProtocolError> {
    let out = match codec {
        Compression::None => {
            check_size(input.len(), max_size)?;
            input.to_vec()
        }
        Compression::Gzip => gzip::decompress(input, max_size)?,
        Compression::Snappy => snappy::decompress(input, max_size)?,
        Compression::Lz4 => lz4::decompress(input, max_size)?,
        Compression::Zstd => zstd::decompress(input, max_size)?,
    };
    Ok(Bytes::from(out))
}

/// Fails if `size` exceeds `max_size`.
fn check_size(size: usize, max_size: usize) -> Result<(), ProtocolError> {
    if size > max_size {
        Err(too_large(size as u64, max_size))
    } else {
        Ok(())
    }
}

fn too_large(size: u64, max_size: usize) -> ProtocolError {
    ProtocolError::TooLarge {
        what: "decompressed record batch",
        size,
        limit: max_size as u64,
    }
}

fn corrupt(codec: Compression, reason: impl fmt::Display) -> ProtocolError {
    ProtocolError::Invalid {
        what: "compressed records",
        reason: format!("{codec}: {reason}"),
    }
}

/// Decompresses a codec that is a plain byte stream (gzip, lz4 frames):
/// `reader` reads from `input`, and its output is capped at `max_size`.
fn read_stream<R: Read>(
    codec: Compression,
    input: &[u8],
    reader: R,
    max_size: usize,
) -> Result<Vec<u8>, ProtocolError> {
    if input.is_empty() {
        return Err(corrupt(codec, "empty input"));
    }
    let mut out = Vec::new();
    read_bounded(codec, reader, &mut out, max_size)?;
    Ok(out)
}

/// First read size; the buffer then doubles, never past `max_size + 1`.
const INITIAL_CHUNK: usize = 16 * 1024;

/// Reads `reader` to its end, appending to `out`, failing once `out` would
/// exceed `max_size` bytes. The buffer grows geometrically but its capacity
/// never exceeds `max_size + 1`, whatever the stream claims.
///
/// Each byte of the buffer is zeroed once, when the buffer grows: readers
/// such as lz4 frames return one block (64 KiB) per `read`, and re-zeroing
/// the free tail before every call made 64 MiB of lz4 output cost about
/// 16 GiB of writes (seconds in a release build, minutes in a debug one).
fn read_bounded<R: Read>(
    codec: Compression,
    mut reader: R,
    out: &mut Vec<u8>,
    max_size: usize,
) -> Result<(), ProtocolError> {
    let hard_cap = max_size.saturating_add(1);
    let mut filled = out.len();
    let result = loop {
        if filled >= hard_cap {
            break Err(too_large(filled as u64, max_size));
        }
        if filled == out.len() {
            let target = filled
                .saturating_mul(2)
                .max(filled + INITIAL_CHUNK)
                .min(hard_cap);
            out.reserve_exact(target - filled);
            out.resize(target, 0);
        }
        let free = out.len() - filled;
        match reader.read(&mut out[filled..]) {
            Ok(0) => break Ok(()),
            Ok(n) => filled += n.min(free),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(corrupt(codec, e)),
        }
    };
    out.truncate(filled);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compressible sample: repeated text with some variation.
    pub(super) fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| b"purekafka record "[i % 17] ^ ((i / 1000) as u8))
            .collect()
    }

    #[test]
    fn codes_and_names_round_trip() {
        for c in Compression::ALL {
            assert_eq!(Compression::from_attributes(c.code()).unwrap(), c);
            assert_eq!(c.to_string().parse::<Compression>().unwrap(), c);
            // Upper attribute bits do not disturb the codec.
            assert_eq!(Compression::from_attributes(c.code() | 0x78).unwrap(), c);
        }
        assert_eq!("GZIP".parse::<Compression>().unwrap(), Compression::Gzip);
        assert!("brotli".parse::<Compression>().is_err());
        for code in 5..=7 {
            assert!(matches!(
                Compression::from_attributes(code),
                Err(ProtocolError::Unsupported { .. })
            ));
        }
    }

    #[test]
    fn levels_are_validated() {
        assert!(Compression::Gzip.validate_level(Some(9)).is_ok());
        assert!(Compression::Gzip.validate_level(Some(-1)).is_ok());
        assert!(Compression::Gzip.validate_level(Some(0)).is_err());
        assert!(Compression::Gzip.validate_level(Some(10)).is_err());
        assert!(Compression::Lz4.validate_level(Some(17)).is_ok());
        assert!(Compression::Lz4.validate_level(Some(18)).is_err());
        assert!(Compression::Zstd.validate_level(Some(-5)).is_ok());
        assert!(Compression::Zstd.validate_level(Some(23)).is_err());
        assert!(Compression::Snappy.validate_level(Some(1)).is_err());
        assert!(Compression::None.validate_level(None).is_ok());
        let mut out = BytesMut::new();
        assert!(matches!(
            compress(Compression::Gzip, Some(42), b"x", &mut out),
            Err(ProtocolError::Encode { .. })
        ));
    }

    #[test]
    fn every_codec_round_trips_and_appends() {
        let data = sample(200_000);
        for c in Compression::ALL {
            let mut out = BytesMut::from(&b"prefix"[..]);
            compress(c, None, &data, &mut out).unwrap();
            assert_eq!(&out[..6], b"prefix");
            let back = decompress(c, &out[6..], data.len()).unwrap();
            assert_eq!(back, data, "{c}");
            let empty = {
                let mut o = BytesMut::new();
                compress(c, None, b"", &mut o).unwrap();
                o
            };
            assert!(decompress(c, &empty, 0).unwrap().is_empty(), "{c}");
        }
    }

    #[test]
    fn every_codec_bounds_output() {
        let data = vec![0u8; 4 << 20];
        for c in Compression::ALL {
            let mut out = BytesMut::new();
            compress(c, None, &data, &mut out).unwrap();
            let err = decompress(c, &out, 1 << 20).unwrap_err();
            assert!(
                matches!(err, ProtocolError::TooLarge { .. }),
                "{c}: {err:?}"
            );
            assert!(decompress(c, &out, data.len()).is_ok(), "{c}");
            assert!(decompress(c, &out, data.len() - 1).is_err(), "{c}");
        }
    }

    #[test]
    fn garbage_is_an_error() {
        let garbage: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for c in Compression::ALL {
            if c == Compression::None {
                continue;
            }
            assert!(decompress(c, &garbage, 1 << 20).is_err(), "{c}");
            assert!(decompress(c, &garbage[..3], 1 << 20).is_err(), "{c}");
        }
    }

    /// A reader that hands out at most `chunk` bytes per call, as lz4
    /// frames do (one block per `read`).
    struct Trickle<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.chunk.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn read_bounded_keeps_earlier_output_and_small_reads_intact() {
        let data = sample(300_000);
        // zstd appends frame after frame to the same buffer.
        let mut out = b"prefix".to_vec();
        let reader = Trickle {
            data: &data,
            chunk: 1000,
        };
        read_bounded(Compression::Lz4, reader, &mut out, 300_006).unwrap();
        assert_eq!(&out[..6], b"prefix");
        assert_eq!(&out[6..], &data[..]);
        assert!(out.capacity() <= 300_007);
        let mut out = Vec::new();
        let reader = Trickle {
            data: &data,
            chunk: 7,
        };
        let err = read_bounded(Compression::Lz4, reader, &mut out, 299_999).unwrap_err();
        assert!(
            matches!(err, ProtocolError::TooLarge { limit: 299_999, .. }),
            "{err:?}"
        );
        assert!(out.len() <= 300_000 && out.capacity() <= 300_000);
    }

    #[test]
    fn read_bounded_capacity_stays_bounded() {
        let data = vec![7u8; 100_000];
        let mut out = Vec::new();
        read_bounded(Compression::None, &data[..], &mut out, 100_000).unwrap();
        assert_eq!(out.len(), 100_000);
        assert!(out.capacity() <= 100_001);
        let mut out = Vec::new();
        let err = read_bounded(Compression::None, &data[..], &mut out, 99_999).unwrap_err();
        assert!(matches!(err, ProtocolError::TooLarge { .. }));
        assert!(out.capacity() <= 100_000);
    }
}
