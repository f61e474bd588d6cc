//! A request body kept as the chunks it was built from, and a whole frame
//! (size prefix and header, then the body) read as one [`Buf`] without
//! joining the chunks: a Produce request's record batches stay the
//! `Bytes` the accumulator sealed until the socket takes them.

use bytes::{Buf, Bytes};

/// An encoded request body (no header, no size prefix) as a list of
/// chunks, written one after the other.
#[derive(Debug, Clone, Default)]
pub struct RequestBody {
    parts: Vec<Bytes>,
    len: usize,
}

impl RequestBody {
    /// An empty body.
    pub fn new() -> RequestBody {
        RequestBody::default()
    }

    /// Appends `part` (an empty one is dropped).
    pub fn push(&mut self, part: Bytes) {
        if !part.is_empty() {
            self.len += part.len();
            self.parts.push(part);
        }
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks, in order.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The body as one contiguous buffer (copies unless it is one chunk).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => many.concat().into(),
        }
    }
}

impl From<Bytes> for RequestBody {
    fn from(bytes: Bytes) -> RequestBody {
        let mut body = RequestBody::new();
        body.push(bytes);
        body
    }
}

/// A frame's bytes as a [`Buf`]: `head` (size prefix and request header,
/// maybe a small body copied after them) then the `parts` of the body.
/// Its `chunks_vectored` lets a vectored write take the whole frame in one
/// system call.
#[derive(Debug)]
pub struct FrameBuf<'a> {
    head: &'a [u8],
    parts: &'a [Bytes],
    /// Index of the current segment: 0 is `head`, `i` is `parts[i - 1]`.
    segment: usize,
    /// Bytes of the current segment already consumed.
    offset: usize,
    remaining: usize,
}

impl<'a> FrameBuf<'a> {
    /// `head` followed by each of `parts`.
    pub fn new(head: &'a [u8], parts: &'a [Bytes]) -> FrameBuf<'a> {
        let remaining = head.len() + parts.iter().map(Bytes::len).sum::<usize>();
        let mut buf = FrameBuf {
            head,
            parts,
            segment: 0,
            offset: 0,
            remaining,
        };
        buf.skip_empty();
        buf
    }

    fn segment_bytes(&self, i: usize) -> &'a [u8] {
        match i {
            0 => self.head,
            i => self.parts.get(i - 1).map_or(&[], |b| &b[..]),
        }
    }

    /// Moves past exhausted segments, so `chunk` is empty only at the end.
    fn skip_empty(&mut self) {
        while self.segment <= self.parts.len()
            && self.offset >= self.segment_bytes(self.segment).len()
        {
            self.segment += 1;
            self.offset = 0;
        }
    }
}

impl Buf for FrameBuf<'_> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.segment_bytes(self.segment)
            .get(self.offset..)
            .unwrap_or(&[])
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end of a frame");
        self.remaining -= cnt;
        while cnt > 0 {
            let left = self.segment_bytes(self.segment).len() - self.offset;
            let step = left.min(cnt);
            self.offset += step;
            cnt -= step;
            self.skip_empty();
        }
    }

    fn chunks_vectored<'b>(&'b self, dst: &mut [std::io::IoSlice<'b>]) -> usize {
        let mut n = 0;
        let mut segment = self.segment;
        let mut offset = self.offset;
        while n < dst.len() && segment <= self.parts.len() {
            let bytes = self.segment_bytes(segment).get(offset..).unwrap_or(&[]);
            if !bytes.is_empty() {
                dst[n] = std::io::IoSlice::new(bytes);
                n += 1;
            }
            segment += 1;
            offset = 0;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;

    fn parts() -> Vec<Bytes> {
        vec![
            Bytes::from_static(b"abc"),
            Bytes::from_static(b"defgh"),
            Bytes::from_static(b"ij"),
        ]
    }

    #[test]
    fn a_body_counts_its_chunks_and_joins_them() {
        let mut body = RequestBody::new();
        assert!(body.is_empty());
        for p in parts() {
            body.push(p);
        }
        body.push(Bytes::new());
        assert_eq!(body.len(), 10);
        assert_eq!(body.parts().len(), 3, "the empty chunk is dropped");
        assert_eq!(&body.to_bytes()[..], b"abcdefghij");
        let one = RequestBody::from(Bytes::from_static(b"xyz"));
        assert_eq!(one.to_bytes().as_ptr(), one.parts()[0].as_ptr());
    }

    #[test]
    fn a_frame_reads_head_then_parts_across_any_advance() {
        let parts = parts();
        // Every split of the 14 bytes into two advances reads the same.
        for first in 0..=14 {
            let mut buf = FrameBuf::new(b"HEAD", &parts);
            let mut out = Vec::new();
            let mut take = |buf: &mut FrameBuf<'_>, mut n: usize| {
                while n > 0 {
                    let chunk = buf.chunk();
                    let step = chunk.len().min(n);
                    assert!(step > 0, "an empty chunk before the end");
                    out.extend_from_slice(&chunk[..step]);
                    buf.advance(step);
                    n -= step;
                }
            };
            take(&mut buf, first);
            assert_eq!(buf.remaining(), 14 - first);
            take(&mut buf, 14 - first);
            assert_eq!(out, b"HEADabcdefghij");
            assert!(!buf.has_remaining());
            assert!(buf.chunk().is_empty());
        }
    }

    #[test]
    fn vectored_chunks_start_mid_segment_and_skip_empty_ones() {
        let parts = vec![
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"de"),
        ];
        let mut buf = FrameBuf::new(b"", &parts);
        buf.advance(1);
        let mut slices = [IoSlice::new(&[]); 4];
        let n = buf.chunks_vectored(&mut slices);
        let got: Vec<&[u8]> = slices[..n].iter().map(|s| &s[..]).collect();
        assert_eq!(got, vec![&b"bc"[..], &b"de"[..]]);
        // A short destination takes what fits.
        let mut one = [IoSlice::new(&[])];
        assert_eq!(buf.chunks_vectored(&mut one), 1);
        assert_eq!(&one[0][..], b"bc");
    }
}
