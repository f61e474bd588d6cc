//! The Produce request body (API key 0, versions 3-12;
//! <https://kafka.apache.org/protocol#The_Messages_Produce>), encoded so
//! that each record batch stays its own chunk: the fields around the
//! batches go into one small buffer, and the batches' `Bytes` are listed
//! between its pieces instead of copied after them. Byte for byte the same
//! as `kafka-protocol`'s `ProduceRequest` encoding (tested below).
//!
//! v9 and later are "flexible" (KIP-482): compact strings, arrays and
//! bytes (unsigned varint length + 1) and an empty tagged-field section
//! after the request, each topic and each partition. v13 addresses topics
//! by id and is not written here.

use bytes::{BufMut, Bytes, BytesMut};

use super::RequestBody;
use crate::protocol::ProtocolError;

/// Produce versions this encoder writes.
pub const PRODUCE_VERSIONS: std::ops::RangeInclusive<i16> = 3..=12;
/// First flexible Produce version.
const FIRST_FLEXIBLE: i16 = 9;

/// One topic of a Produce request: its name and, per partition, the
/// partition index and its record batch.
#[derive(Debug, Clone)]
pub struct ProduceTopic<'a> {
    /// The topic name.
    pub name: &'a str,
    /// `(partition index, record batch)` pairs, in the order written.
    pub partitions: Vec<(i32, Bytes)>,
}

/// The Produce request's fields besides its topics.
#[derive(Debug, Clone, Copy)]
pub struct ProduceHeader<'a> {
    /// `transactional.id`, when the producer is transactional.
    pub transactional_id: Option<&'a str>,
    /// `acks` on the wire: 0, 1 or -1.
    pub acks: i16,
    /// How long the broker may wait for the acknowledgements.
    pub timeout_ms: i32,
}

/// Encodes a Produce request body at `version` with every record batch
/// left as its own chunk (no copy).
pub fn encode_produce(
    version: i16,
    header: ProduceHeader<'_>,
    topics: &[ProduceTopic<'_>],
) -> Result<RequestBody, ProtocolError> {
    if !PRODUCE_VERSIONS.contains(&version) {
        return Err(ProtocolError::Unsupported {
            what: "Produce version for the chunked encoder",
            value: version.into(),
        });
    }
    let flexible = version >= FIRST_FLEXIBLE;
    let small = 16
        + header.transactional_id.map_or(0, str::len)
        + topics
            .iter()
            .map(|t| 16 + t.name.len() + 16 * t.partitions.len())
            .sum::<usize>();
    let mut w = Writer {
        buf: BytesMut::with_capacity(small),
        flexible,
    };
    w.nullable_string(header.transactional_id)?;
    w.buf.put_i16(header.acks);
    w.buf.put_i32(header.timeout_ms);
    w.array_len(topics.len())?;
    let mut body = RequestBody::new();
    for topic in topics {
        w.nullable_string(Some(topic.name))?;
        w.array_len(topic.partitions.len())?;
        for (index, batch) in &topic.partitions {
            w.buf.put_i32(*index);
            w.bytes_len(batch.len())?;
            // Everything so far is one chunk; the batch follows as it is.
            body.push(w.buf.split().freeze());
            body.push(batch.clone());
            w.tagged_fields();
        }
        w.tagged_fields();
    }
    w.tagged_fields();
    body.push(w.buf.split().freeze());
    Ok(body)
}

/// Writes the small fields in the version's flavour (classic or compact).
struct Writer {
    buf: BytesMut,
    flexible: bool,
}

impl Writer {
    fn nullable_string(&mut self, s: Option<&str>) -> Result<(), ProtocolError> {
        match (s, self.flexible) {
            (None, true) => put_uvarint(&mut self.buf, 0),
            (None, false) => self.buf.put_i16(-1),
            (Some(s), true) => {
                put_uvarint(&mut self.buf, length_plus_one(s.len(), "string")?);
                self.buf.put_slice(s.as_bytes());
            }
            (Some(s), false) => {
                let len = i16::try_from(s.len()).map_err(|_| too_large("string", s.len()))?;
                self.buf.put_i16(len);
                self.buf.put_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    fn array_len(&mut self, n: usize) -> Result<(), ProtocolError> {
        if self.flexible {
            put_uvarint(&mut self.buf, length_plus_one(n, "array")?);
        } else {
            self.buf
                .put_i32(i32::try_from(n).map_err(|_| too_large("array", n))?);
        }
        Ok(())
    }

    /// The length in front of a (non-null) records field.
    fn bytes_len(&mut self, n: usize) -> Result<(), ProtocolError> {
        if self.flexible {
            put_uvarint(&mut self.buf, length_plus_one(n, "record batch")?);
        } else {
            self.buf
                .put_i32(i32::try_from(n).map_err(|_| too_large("record batch", n))?);
        }
        Ok(())
    }

    /// An empty tagged-field section (flexible versions only).
    fn tagged_fields(&mut self) {
        if self.flexible {
            put_uvarint(&mut self.buf, 0);
        }
    }
}

/// A compact length: `n + 1`, within what Java reads (a positive `i32`).
fn length_plus_one(n: usize, what: &'static str) -> Result<u32, ProtocolError> {
    i32::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(1))
        .map(|n| n as u32)
        .ok_or_else(|| too_large(what, n))
}

fn too_large(what: &'static str, size: usize) -> ProtocolError {
    ProtocolError::TooLarge {
        what,
        size: size as u64,
        limit: i32::MAX as u64,
    }
}

fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::encode_body;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    fn batch(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    /// The same request through kafka-protocol's generated encoder.
    fn reference(version: i16, header: ProduceHeader<'_>, topics: &[ProduceTopic<'_>]) -> Bytes {
        let req = ProduceRequest::default()
            .with_transactional_id(
                header
                    .transactional_id
                    .map(|t| TransactionalId(StrBytes::from_string(t.to_owned()))),
            )
            .with_acks(header.acks)
            .with_timeout_ms(header.timeout_ms)
            .with_topic_data(
                topics
                    .iter()
                    .map(|t| {
                        TopicProduceData::default()
                            .with_name(TopicName(StrBytes::from_string(t.name.to_owned())))
                            .with_partition_data(
                                t.partitions
                                    .iter()
                                    .map(|(i, b)| {
                                        PartitionProduceData::default()
                                            .with_index(*i)
                                            .with_records(Some(b.clone()))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        encode_body(&req, version).expect("reference encoding")
    }

    #[test]
    fn every_version_matches_the_generated_encoder_byte_for_byte() {
        // A 200-byte batch needs a two-byte compact length; 127 + 1 does too.
        let topics = vec![
            ProduceTopic {
                name: "orders",
                partitions: vec![(0, batch(200, 1)), (5, batch(127, 2))],
            },
            ProduceTopic {
                name: "a-much-longer-topic-name-for-lengths",
                partitions: vec![(2, batch(3, 3))],
            },
        ];
        for version in PRODUCE_VERSIONS {
            for txn in [None, Some("txn-1")] {
                for acks in [-1i16, 0, 1] {
                    let header = ProduceHeader {
                        transactional_id: txn,
                        acks,
                        timeout_ms: 30_000,
                    };
                    let ours = encode_produce(version, header, &topics).expect("encode");
                    let expected = reference(version, header, &topics);
                    assert_eq!(ours.len(), expected.len(), "v{version} {txn:?} acks {acks}");
                    assert_eq!(ours.to_bytes(), expected, "v{version} {txn:?} acks {acks}");
                }
            }
            let header = ProduceHeader {
                transactional_id: None,
                acks: 1,
                timeout_ms: 1,
            };
            let no_topics = encode_produce(version, header, &[]).expect("encode");
            assert_eq!(no_topics.to_bytes(), reference(version, header, &[]));
        }
    }

    #[test]
    fn batches_are_chunks_of_their_own_not_copies() {
        let a = batch(1000, 7);
        let b = batch(2000, 8);
        let topics = [ProduceTopic {
            name: "t",
            partitions: vec![(0, a.clone()), (1, b.clone())],
        }];
        let header = ProduceHeader {
            transactional_id: None,
            acks: -1,
            timeout_ms: 1000,
        };
        let body = encode_produce(12, header, &topics).expect("encode");
        let shares = |x: &Bytes| body.parts().iter().any(|p| p.as_ptr() == x.as_ptr());
        assert!(
            shares(&a) && shares(&b),
            "each batch is written from its own buffer"
        );
        // Prefix, batch, partition tags + next prefix, batch, trailer.
        assert_eq!(body.parts().len(), 5);
    }

    #[test]
    fn versions_outside_3_to_12_are_refused() {
        let header = ProduceHeader {
            transactional_id: None,
            acks: 1,
            timeout_ms: 1,
        };
        for version in [2, 13] {
            assert!(matches!(
                encode_produce(version, header, &[]),
                Err(ProtocolError::Unsupported { .. })
            ));
        }
    }

    #[test]
    fn a_topic_name_too_long_for_its_length_field_is_an_error() {
        let name = "x".repeat(40_000);
        let topics = [ProduceTopic {
            name: &name,
            partitions: vec![(0, batch(1, 0))],
        }];
        let header = ProduceHeader {
            transactional_id: None,
            acks: 1,
            timeout_ms: 1,
        };
        assert!(matches!(
            encode_produce(8, header, &topics),
            Err(ProtocolError::TooLarge { .. })
        ));
        // The compact form has room for it.
        assert!(encode_produce(9, header, &topics).is_ok());
    }
}
