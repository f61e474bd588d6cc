//! Zstandard (attribute code 4, KIP-110): encoding with `structured-zstd`,
//! decoding with `ruzstd`, both pure Rust.
//!
//! Decoding reads every frame in the input (skippable frames are skipped).
//! `ruzstd` reserves a frame's whole window before decoding, so the window
//! declared in each frame header is checked first: it must not exceed
//! `max(max_size, 8 MiB)` (8 MiB is the largest window Java's streaming
//! encoder uses up to level 21), and a declared content size must fit in what
//! is left of `max_size`.
//!
//! Encoding honours `compression.zstd.level` (KIP-390; default 3, as Java's
//! zstd-jni): `structured-zstd` implements every level of the reference
//! library, and its frames match the reference sizes at the same level
//! (see DESIGN.md, "Compression"). Each batch is one frame with its content
//! size, no checksum (as Java writes it). The compressor (match tables,
//! entropy tables, scratch) is kept per thread and per level and reused from
//! batch to batch, as Java and librdkafka reuse their compression contexts:
//! building it per batch cost more than compressing a 16 KiB batch.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use bytes::BytesMut;
use ruzstd::decoding::{FrameDecoder, StreamingDecoder};
use structured_zstd::encoding::{CompressionLevel, FrameCompressor};

use super::{corrupt, read_bounded, too_large, Compression};
use crate::protocol::ProtocolError;

const FRAME_MAGIC: u32 = 0xFD2F_B528;
/// Skippable frames use magics 0x184D2A50..=0x184D2A5F.
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;
/// Window accepted whatever `max_size` is.
const WINDOW_ALLOWANCE: u64 = 8 << 20;
/// Kafka's default `compression.zstd.level` (KIP-390), zstd's own default.
pub(super) const DEFAULT_LEVEL: i32 = 3;

/// A reusable compressor and the frame buffer it writes to.
struct Encoder {
    level: i32,
    compressor: FrameCompressor,
    frame: Vec<u8>,
}

thread_local! {
    /// This thread's encoder, for the last level it was asked for.
    static ENCODER: RefCell<Option<Encoder>> = const { RefCell::new(None) };
}

/// Compresses `input` as one frame at `level` (`None`: 3), appending it to
/// `out`. Levels are validated by the caller (`-131072..=22`).
pub(super) fn compress(
    level: Option<i32>,
    input: &[u8],
    out: &mut BytesMut,
) -> Result<(), ProtocolError> {
    let level = level.unwrap_or(DEFAULT_LEVEL);
    ENCODER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let mut encoder = match slot.take() {
            Some(e) if e.level == level => e,
            _ => Encoder {
                level,
                compressor: FrameCompressor::new(CompressionLevel::from_level(level)),
                frame: Vec::new(),
            },
        };
        // The encoder documents panics on internal errors; a panic must not
        // take the producer's task down, and the compressor it leaves
        // behind is dropped rather than reused.
        let compressed = catch_unwind(AssertUnwindSafe(|| {
            encoder
                .compressor
                .compress_independent_frame_into(input, &mut encoder.frame);
        }));
        match compressed {
            Ok(()) => {
                out.extend_from_slice(&encoder.frame);
                *slot = Some(encoder);
                Ok(())
            }
            Err(_) => Err(ProtocolError::Encode {
                what: "zstd frame",
                reason: format!(
                    "structured-zstd failed on a {} byte batch at level {level}",
                    input.len()
                ),
            }),
        }
    })
}

pub(super) fn decompress(input: &[u8], max_size: usize) -> Result<Vec<u8>, ProtocolError> {
    if input.is_empty() {
        return Err(corrupt(Compression::Zstd, "empty input"));
    }
    let mut out = Vec::new();
    let mut rest = input;
    let mut decoder = FrameDecoder::new();
    while !rest.is_empty() {
        let magic = read_le(rest, 0, 4)?;
        if magic as u32 & 0xFFFF_FFF0 == SKIPPABLE_MAGIC {
            let len = read_le(rest, 4, 4)? as usize;
            rest = rest
                .get(8 + len..)
                .ok_or_else(|| corrupt(Compression::Zstd, "truncated skippable frame"))?;
            continue;
        }
        let header = FrameLimits::parse(rest)?;
        let budget = max_size - out.len();
        if let Some(size) = header.content_size {
            if size > budget as u64 {
                return Err(too_large(size.saturating_add(out.len() as u64), max_size));
            }
        }
        if header.window > WINDOW_ALLOWANCE.max(max_size as u64) {
            return Err(ProtocolError::TooLarge {
                what: "zstd window",
                size: header.window,
                limit: WINDOW_ALLOWANCE.max(max_size as u64),
            });
        }
        let mut stream = StreamingDecoder::new_with_decoder(&mut rest, &mut decoder)
            .map_err(|e| corrupt(Compression::Zstd, e))?;
        read_bounded(Compression::Zstd, &mut stream, &mut out, max_size)?;
        if !stream.decoder.is_finished() {
            return Err(corrupt(Compression::Zstd, "truncated frame"));
        }
        if let (Some(stored), Some(computed)) = (
            stream.decoder.get_checksum_from_data(),
            stream.decoder.get_calculated_checksum(),
        ) {
            if stored != computed {
                return Err(corrupt(Compression::Zstd, "content checksum mismatch"));
            }
        }
    }
    Ok(out)
}

/// Sizes declared by a zstd frame header (RFC 8878 section 3.1.1.1).
struct FrameLimits {
    window: u64,
    content_size: Option<u64>,
}

impl FrameLimits {
    fn parse(frame: &[u8]) -> Result<Self, ProtocolError> {
        if read_le(frame, 0, 4)? as u32 != FRAME_MAGIC {
            return Err(corrupt(Compression::Zstd, "bad frame magic"));
        }
        let descriptor = read_le(frame, 4, 1)? as u8;
        let single_segment = descriptor & 0x20 != 0;
        let mut pos = 5;
        let mut window = 0;
        if !single_segment {
            let wd = read_le(frame, pos, 1)?;
            pos += 1;
            let base = 1u64 << (10 + (wd >> 3));
            window = base + (base / 8) * (wd & 7);
        }
        pos += [0, 1, 2, 4][usize::from(descriptor & 3)];
        let content_size = match (descriptor >> 6, single_segment) {
            (0, false) => None,
            (0, true) => Some(read_le(frame, pos, 1)?),
            (1, _) => Some(read_le(frame, pos, 2)? + 256),
            (2, _) => Some(read_le(frame, pos, 4)?),
            _ => Some(read_le(frame, pos, 8)?),
        };
        if single_segment {
            window = content_size.unwrap_or(0);
        }
        Ok(FrameLimits {
            window,
            content_size,
        })
    }
}

/// Reads a little-endian unsigned integer of `len` (<= 8) bytes at `pos`.
fn read_le(buf: &[u8], pos: usize, len: usize) -> Result<u64, ProtocolError> {
    let bytes = buf
        .get(pos..pos + len)
        .ok_or_else(|| corrupt(Compression::Zstd, "truncated frame header"))?;
    Ok(bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Text-like input: words of a small vocabulary in a pseudo-random order.
    fn words(len: usize) -> Vec<u8> {
        const VOCABULARY: [&str; 12] = [
            "order",
            "created",
            "service",
            "payment",
            "user",
            "id",
            "\"status\":",
            "ok",
            "timeout",
            "eu-west-1",
            "retry",
            "\n",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.extend_from_slice(VOCABULARY[(state % 12) as usize].as_bytes());
            out.extend_from_slice(format!(" {} ", state % 1000).as_bytes());
        }
        out.truncate(len);
        out
    }

    fn compressed_len(level: i32, input: &[u8]) -> usize {
        let mut out = BytesMut::new();
        compress(Some(level), input, &mut out).unwrap();
        assert_eq!(
            decompress(&out, input.len()).unwrap(),
            input,
            "level {level}"
        );
        out.len()
    }

    #[test]
    fn levels_are_honoured() {
        let data = words(256 << 10);
        let fast = compressed_len(-5, &data);
        let default = compressed_len(3, &data);
        let strong = compressed_len(19, &data);
        assert!(fast > default, "-5: {fast} bytes, 3: {default}");
        assert!(default > strong, "3: {default} bytes, 19: {strong}");
        // 0 is zstd's alias of the default level; `None` is Kafka's default.
        assert_eq!(compressed_len(0, &data), default);
        let mut out = BytesMut::new();
        compress(None, &data, &mut out).unwrap();
        assert_eq!(out.len(), default);
    }

    #[test]
    fn the_reused_compressor_gives_each_batch_its_own_frame() {
        // Alternating inputs and levels on one thread's compressor: every
        // frame decodes alone to its own input (no state leaks between
        // batches).
        let batches = [words(70_000), vec![7u8; 5_000], words(300)];
        for round in 0..3 {
            for (i, batch) in batches.iter().enumerate() {
                let level = [3, 1, 3, 9][(round + i) % 4];
                let mut out = BytesMut::new();
                compress(Some(level), batch, &mut out).unwrap();
                assert_eq!(&decompress(&out, batch.len()).unwrap(), batch);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn round_trips_at_every_kind_of_level(
            data in prop::collection::vec(any::<u8>(), 0..40_000),
            text in 0usize..40_000,
            level in prop::sample::select(vec![-131_072, -5, 1, 3, 6, 12, 19, 22]),
        ) {
            for input in [data, words(text)] {
                let mut out = BytesMut::new();
                compress(Some(level), &input, &mut out).unwrap();
                prop_assert_eq!(decompress(&out, input.len()).unwrap(), input);
            }
        }
    }

    #[test]
    fn concatenated_and_skippable_frames() {
        let mut out = BytesMut::new();
        compress(None, b"first ", &mut out).unwrap();
        out.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9]);
        compress(Some(19), b"second", &mut out).unwrap();
        assert_eq!(decompress(&out, 100).unwrap(), b"first second");
    }

    #[test]
    fn huge_window_is_refused_before_decoding() {
        // Magic, descriptor without single segment, window descriptor
        // exponent 20 (1 GiB window), then junk.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 20 << 3, 0, 0, 0];
        assert!(matches!(
            decompress(&frame, 1 << 20),
            Err(ProtocolError::TooLarge {
                what: "zstd window",
                ..
            })
        ));
    }

    #[test]
    fn declared_content_size_is_bounded() {
        // Single segment, 4-byte content size of 16 MiB.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0, 0, 0, 1, 0, 0];
        assert!(matches!(
            decompress(&frame, 1 << 20),
            Err(ProtocolError::TooLarge { .. })
        ));
    }
}
