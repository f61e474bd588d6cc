//! A double-hash ("dfast") match finder handed to structured-zstd through
//! its `SequenceProducer` hook, to measure whether a match finder of our own
//! closes the gap to the C library's level 3 (issue #21). The parse follows
//! the strategy level 3 names (RFC 8878 leaves the parse to the encoder):
//! at each position look up an 8-byte hash (long table) and a 5-byte hash
//! (short table), prefer the last match's offset at the next position,
//! then a long match, then a short one (trying a long one a byte later),
//! extend the match backwards over pending literals, and skip ahead faster
//! the longer nothing matched.
//!
//! Positions are stored as `base + index`, with `base` moving past every
//! block, so the tables need no clearing between blocks: an entry below the
//! current block's `base` is stale and ignored.

use structured_zstd::encoding::sequences::{
    ExternalSequence, SequenceProducer, SequenceProducerError,
};

/// Bytes read at a position by the hashes and the first comparisons.
const READ: usize = 8;
/// Skip ahead by `1 + gap >> SEARCH_STRENGTH` after a miss.
const SEARCH_STRENGTH: u32 = 8;
/// Odd multipliers for the multiplicative hashes.
const MUL_LONG: u64 = 0x9E37_79B9_7F4A_7C15;
const MUL_SHORT: u64 = 0xD6E8_FEB8_6659_FD93;

pub struct Dfast {
    long: Vec<u32>,
    short: Vec<u32>,
    long_shift: u32,
    short_shift: u32,
    /// Where the next block's index 0 lies in the tables' position space.
    base: u32,
}

impl Dfast {
    /// Tables of `1 << long_log` and `1 << short_log` entries (level 3 on a
    /// batch of at most 128 KiB: 16 and 15).
    pub fn new(long_log: u32, short_log: u32) -> Self {
        Self {
            long: vec![0; 1 << long_log],
            short: vec![0; 1 << short_log],
            long_shift: 64 - long_log,
            short_shift: 64 - short_log,
            // Position 0 means "empty": start above it.
            base: 1,
        }
    }
}

#[inline(always)]
fn read64(src: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(src[i..i + 8].try_into().unwrap())
}

#[inline(always)]
fn read32(src: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(src[i..i + 4].try_into().unwrap())
}

/// Length of the common run of `src[a..]` and `src[b..]` (`b < a`), up to
/// the end of `src`.
#[inline(always)]
fn common(src: &[u8], mut a: usize, mut b: usize) -> usize {
    let start = a;
    while a + 8 <= src.len() {
        let x = read64(src, a) ^ read64(src, b);
        if x != 0 {
            return a - start + (x.trailing_zeros() / 8) as usize;
        }
        a += 8;
        b += 8;
    }
    while a < src.len() && src[a] == src[b] {
        a += 1;
        b += 1;
    }
    a - start
}

impl Dfast {
    #[inline(always)]
    fn hl(&self, src: &[u8], i: usize) -> usize {
        (read64(src, i).wrapping_mul(MUL_LONG) >> self.long_shift) as usize
    }

    #[inline(always)]
    fn hs(&self, src: &[u8], i: usize) -> usize {
        ((read64(src, i) << 24).wrapping_mul(MUL_SHORT) >> self.short_shift) as usize
    }

    fn parse(&mut self, src: &[u8], window: usize, out: &mut Vec<ExternalSequence>) {
        let base = self.base as usize;
        // A stored position `p` is usable if it lies in this block.
        let at = |p: u32| -> Option<usize> { (p as usize).checked_sub(base) };
        let limit = src.len().saturating_sub(READ);
        let (mut rep1, mut rep2) = (1usize, 4usize);
        let (mut ip, mut anchor) = (0usize, 0usize);
        let mut emit = |out: &mut Vec<ExternalSequence>, lit: usize, off: usize, len: usize| {
            out.push(ExternalSequence {
                offset: off as u32,
                lit_len: lit as u32,
                match_len: len as u32,
                rep: 0,
            });
        };
        // The first position whose previous byte can start a rep match.
        if src.len() > READ {
            ip = 1;
        }
        while ip < limit {
            let (hl, hs) = (self.hl(src, ip), self.hs(src, ip));
            let cand_long = at(self.long[hl]);
            let cand_short = at(self.short[hs]);
            let pos = (base + ip) as u32;
            self.long[hl] = pos;
            self.short[hs] = pos;

            // The last offset at the next position.
            let next = ip + 1;
            let rep = rep1 <= next
                && next + 4 <= src.len()
                && read32(src, next) == read32(src, next - rep1);
            // (start, candidate, len): the match taken at this position.
            let mut found: Option<(usize, usize, usize)> = None;
            if rep {
                found = Some((
                    next,
                    next - rep1,
                    4 + common(src, next + 4, next + 4 - rep1),
                ));
            } else if let Some(c) = cand_long.filter(|&c| c < ip && ip - c <= window) {
                if read64(src, c) == read64(src, ip) {
                    found = Some((ip, c, 8 + common(src, ip + 8, c + 8)));
                }
            }
            if found.is_none() {
                if let Some(c) = cand_short.filter(|&c| c < ip && ip - c <= window) {
                    if read32(src, c) == read32(src, ip) {
                        // A long match one byte on beats this short one.
                        let next_long = if ip + 1 < limit {
                            let h = self.hl(src, ip + 1);
                            let l = at(self.long[h]);
                            self.long[h] = pos + 1;
                            l.filter(|&l| l < ip + 1 && ip + 1 - l <= window)
                                .filter(|&l| read64(src, l) == read64(src, ip + 1))
                        } else {
                            None
                        };
                        found = Some(match next_long {
                            Some(l) => (ip + 1, l, 8 + common(src, ip + 9, l + 8)),
                            None => (ip, c, 4 + common(src, ip + 4, c + 4)),
                        });
                    }
                }
            }
            let Some((mut start, mut cand, mut len)) = found else {
                ip += ((ip - anchor) >> SEARCH_STRENGTH) + 1;
                continue;
            };
            // Extend backwards over the pending literals (a match at the
            // last offset is taken as found).
            while !rep && start > anchor && cand > 0 && src[start - 1] == src[cand - 1] {
                start -= 1;
                cand -= 1;
                len += 1;
            }
            let off = start - cand;
            if !rep {
                rep2 = rep1;
                rep1 = off;
            }
            emit(out, start - anchor, off, len);
            ip = start + len;
            anchor = ip;
            self.after_match(
                src,
                pos,
                &mut ip,
                &mut anchor,
                limit,
                &mut rep1,
                &mut rep2,
                out,
                &mut emit,
            );
        }
        out.push(ExternalSequence::delimiter((src.len() - anchor) as u32));
        self.base = self.base.saturating_add(src.len() as u32 + 1);
    }

    /// After a match ending at `ip`: index two positions inside it, then
    /// take matches at the second-to-last offset for as long as they come.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn after_match(
        &mut self,
        src: &[u8],
        pos: u32,
        ip: &mut usize,
        anchor: &mut usize,
        limit: usize,
        rep1: &mut usize,
        rep2: &mut usize,
        out: &mut Vec<ExternalSequence>,
        emit: &mut impl FnMut(&mut Vec<ExternalSequence>, usize, usize, usize),
    ) {
        if *ip > limit {
            return;
        }
        let base = self.base as usize;
        let inside = pos as usize - base + 2;
        if inside < limit {
            let (h, s) = (self.hl(src, inside), self.hs(src, inside));
            self.long[h] = (base + inside) as u32;
            self.short[s] = (base + inside) as u32;
        }
        let h = self.hl(src, *ip - 2);
        self.long[h] = (base + *ip - 2) as u32;
        let s = self.hs(src, *ip - 1);
        self.short[s] = (base + *ip - 1) as u32;
        while *ip <= limit && *rep2 <= *ip && read32(src, *ip) == read32(src, *ip - *rep2) {
            let len = 4 + common(src, *ip + 4, *ip + 4 - *rep2);
            std::mem::swap(rep1, rep2);
            let (h, s) = (self.hl(src, *ip), self.hs(src, *ip));
            self.long[h] = (base + *ip) as u32;
            self.short[s] = (base + *ip) as u32;
            emit(out, 0, *rep1, len);
            *ip += len;
            *anchor = *ip;
        }
    }
}

impl SequenceProducer for Dfast {
    fn produce(
        &mut self,
        block: &[u8],
        window_size: u64,
        out: &mut Vec<ExternalSequence>,
    ) -> Result<(), SequenceProducerError> {
        // Room for this block's positions, else start the position space
        // over (clearing the tables once every ~4 GiB).
        if u64::from(self.base) + block.len() as u64 + 2 >= u64::from(u32::MAX) {
            self.long.fill(0);
            self.short.fill(0);
            self.base = 1;
        }
        let window = usize::try_from(window_size).unwrap_or(usize::MAX);
        self.parse(block, window, out);
        Ok(())
    }
}

/// Hands out a parse made beforehand (by [`Dfast`]) for each known block:
/// what the producer path costs beyond the parse itself.
/// Keyed by a block's length and first 64 bytes (the encoder hands the
/// producer its own copy of the input, so not by address).
pub struct Replay(pub std::collections::HashMap<(usize, [u8; 64]), Vec<ExternalSequence>>);

fn key(b: &[u8]) -> (usize, [u8; 64]) {
    (b.len(), b[..64].try_into().unwrap())
}

impl Replay {
    /// The parses [`Dfast`] makes of `blocks` (each one block, at most
    /// 128 KiB).
    pub fn of(blocks: &'static [Vec<u8>]) -> Self {
        let mut d = Dfast::new(16, 15);
        Self(
            blocks
                .iter()
                .map(|b| {
                    let mut seqs = Vec::new();
                    d.produce(b, 1 << 17, &mut seqs).unwrap();
                    (key(b), seqs)
                })
                .collect(),
        )
    }
}

impl SequenceProducer for Replay {
    fn produce(
        &mut self,
        block: &[u8],
        _window_size: u64,
        out: &mut Vec<ExternalSequence>,
    ) -> Result<(), SequenceProducerError> {
        let parse = self.0.get(&key(block)).ok_or_else(|| {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| eprintln!("replay: no parse for a block of {} bytes", block.len()));
            SequenceProducerError
        })?;
        out.extend_from_slice(parse);
        Ok(())
    }
}
