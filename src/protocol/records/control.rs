//! Control records: transaction markers written by the transaction
//! coordinator (KIP-98). A control batch holds one control record whose key
//! is `version i16, type i16` (0 = abort, 1 = commit) and, for markers, whose
//! value is `version i16, coordinatorEpoch i32`.

use super::Record;
use crate::protocol::ProtocolError;

/// What a control record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecordKind {
    /// The transaction aborted (type 0).
    Abort,
    /// The transaction committed (type 1).
    Commit,
    /// Another control type (KRaft and future types); its value is not parsed.
    Unknown(i16),
}

impl ControlRecordKind {
    fn code(self) -> i16 {
        match self {
            ControlRecordKind::Abort => 0,
            ControlRecordKind::Commit => 1,
            ControlRecordKind::Unknown(code) => code,
        }
    }
}

/// A parsed control record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlRecord {
    /// Commit, abort or another control type.
    pub kind: ControlRecordKind,
    /// Epoch of the transaction coordinator that wrote a marker; -1 for
    /// [`ControlRecordKind::Unknown`], whose value is not parsed.
    pub coordinator_epoch: i32,
}

impl ControlRecord {
    /// Parses the key and value of a record from a control batch.
    ///
    /// Newer key or value versions are accepted as long as the fields above
    /// are present (as Java does); negative versions are rejected.
    pub fn parse(record: &Record) -> Result<Self, ProtocolError> {
        let key = record.key.as_deref().unwrap_or_default();
        let (version, kind) = match key {
            [v0, v1, t0, t1, ..] => (
                i16::from_be_bytes([*v0, *v1]),
                i16::from_be_bytes([*t0, *t1]),
            ),
            _ => {
                return Err(invalid(
                    "control record key",
                    format!("{} bytes, need 4", key.len()),
                ))
            }
        };
        if version < 0 {
            return Err(invalid(
                "control record key",
                format!("negative version {version}"),
            ));
        }
        let kind = match kind {
            0 => ControlRecordKind::Abort,
            1 => ControlRecordKind::Commit,
            other => {
                return Ok(ControlRecord {
                    kind: ControlRecordKind::Unknown(other),
                    coordinator_epoch: -1,
                })
            }
        };
        let value = record.value.as_deref().unwrap_or_default();
        match value {
            [v0, v1, e0, e1, e2, e3, ..] => {
                let version = i16::from_be_bytes([*v0, *v1]);
                if version < 0 {
                    return Err(invalid(
                        "transaction marker",
                        format!("negative version {version}"),
                    ));
                }
                Ok(ControlRecord {
                    kind,
                    coordinator_epoch: i32::from_be_bytes([*e0, *e1, *e2, *e3]),
                })
            }
            _ => Err(invalid(
                "transaction marker",
                format!("{} bytes, need 6", value.len()),
            )),
        }
    }

    /// The record key: version 0 and the type.
    pub fn encode_key(&self) -> [u8; 4] {
        let [t0, t1] = self.kind.code().to_be_bytes();
        [0, 0, t0, t1]
    }

    /// The record value: version 0 and the coordinator epoch.
    pub fn encode_value(&self) -> [u8; 6] {
        let [e0, e1, e2, e3] = self.coordinator_epoch.to_be_bytes();
        [0, 0, e0, e1, e2, e3]
    }
}

fn invalid(what: &'static str, reason: String) -> ProtocolError {
    ProtocolError::Invalid { what, reason }
}
