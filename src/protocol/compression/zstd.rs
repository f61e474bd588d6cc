//! Zstandard (attribute code 4, KIP-110) via `ruzstd`.
//!
//! Decoding reads every frame in the input (skippable frames are skipped).
//! `ruzstd` reserves a frame's whole window before decoding, so the window
//! declared in each frame header is checked first: it must not exceed
//! `max(max_size, 8 MiB)` (8 MiB is the largest window Java's streaming
//! encoder uses up to level 21), and a declared content size must fit in what
//! is left of `max_size`.
//!
//! Encoding uses `ruzstd`'s only implemented compressor, "fastest".

use bytes::{BufMut, BytesMut};
use ruzstd::decoding::{FrameDecoder, StreamingDecoder};
use ruzstd::encoding::CompressionLevel;

use super::{corrupt, read_bounded, too_large, Compression};
use crate::protocol::ProtocolError;

const FRAME_MAGIC: u32 = 0xFD2F_B528;
/// Skippable frames use magics 0x184D2A50..=0x184D2A5F.
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;
/// Window accepted whatever `max_size` is.
const WINDOW_ALLOWANCE: u64 = 8 << 20;

pub(super) fn compress(input: &[u8], out: &mut BytesMut) -> Result<(), ProtocolError> {
    ruzstd::encoding::compress(input, out.writer(), CompressionLevel::Fastest);
    Ok(())
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

    #[test]
    fn concatenated_and_skippable_frames() {
        let mut out = BytesMut::new();
        compress(b"first ", &mut out).unwrap();
        out.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 9, 9, 9]);
        compress(b"second", &mut out).unwrap();
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
