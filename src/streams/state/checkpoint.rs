//! The `.checkpoint` file of a persistent store: the changelog offset
//! below which the store holds every write, in Kafka Streams' text format
//! (`OffsetCheckpoint`: a version line `0`, an entry count, then
//! `topic partition offset` lines). Written (to a temporary file, then
//! renamed) on a clean close and, at-least-once, after every commit; and
//! removed when the store is opened. So under exactly-once a crash leaves
//! no checkpoint: the store is then wiped and restored from the
//! changelog's start, never trusted with writes an aborted transaction
//! undid.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::StoreError;
use crate::TopicPartition;

/// What a checkpoint file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checkpoint {
    /// No file: restore from the changelog's start.
    Missing,
    /// The file does not parse, or names another changelog partition: wipe
    /// the store and restore from the start.
    Corrupt(String),
    /// The store holds every changelog write below this offset.
    Offset(i64),
}

/// Reading or writing a checkpoint file.
#[derive(Debug, Clone)]
pub struct CheckpointFile {
    path: PathBuf,
}

impl CheckpointFile {
    /// The checkpoint at `path`.
    pub fn new(path: impl Into<PathBuf>) -> CheckpointFile {
        CheckpointFile { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the offset recorded for `changelog`.
    pub fn read(&self, changelog: &TopicPartition) -> Result<Checkpoint, StoreError> {
        let text = match std::fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Checkpoint::Missing),
            Err(e) => return Err(StoreError::io(&self.path, e)),
        };
        Ok(match parse(&text, changelog) {
            Ok(offset) => Checkpoint::Offset(offset),
            Err(reason) => Checkpoint::Corrupt(reason),
        })
    }

    /// Records `offset` for `changelog` (atomically: a crash leaves the
    /// old file or the new one).
    pub fn write(&self, changelog: &TopicPartition, offset: i64) -> Result<(), StoreError> {
        let text = format!(
            "0\n1\n{} {} {}\n",
            changelog.topic, changelog.partition, offset
        );
        let tmp = self.path.with_extension("checkpoint.tmp");
        let io = |e: std::io::Error| StoreError::io(&self.path, e);
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)
    }

    /// Removes the file (nothing if absent).
    pub fn remove(&self) -> Result<(), StoreError> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(StoreError::io(&self.path, e)),
            _ => Ok(()),
        }
    }
}

/// Parses the file, which must hold exactly one entry, for `changelog`.
fn parse(text: &[u8], changelog: &TopicPartition) -> Result<i64, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let mut lines = text.lines();
    if lines.next() != Some("0") {
        return Err("unknown version (expected 0)".into());
    }
    if lines.next() != Some("1") {
        return Err("expected one entry".into());
    }
    let entry = lines.next().ok_or("the entry is missing")?;
    if lines.next().is_some() {
        return Err("lines after the entry".into());
    }
    let mut parts = entry.rsplitn(3, ' ');
    let offset = parts.next().and_then(|o| o.parse::<i64>().ok());
    let partition = parts.next().and_then(|p| p.parse::<i32>().ok());
    let topic = parts.next();
    match (topic, partition, offset) {
        (Some(t), Some(p), Some(o))
            if t == &*changelog.topic && p == changelog.partition && o >= 0 =>
        {
            Ok(o)
        }
        (Some(t), Some(p), Some(o)) if o >= 0 => Err(format!(
            "it is for {t}-{p}, not {}-{}",
            changelog.topic, changelog.partition
        )),
        _ => Err(format!("bad entry {entry:?}")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory.
    pub(crate) fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "purekafka-state-{what}-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_written_checkpoint_reads_back_and_removing_it_makes_it_missing() {
        let dir = temp_dir("cp");
        let tp = TopicPartition::new("app-counts-changelog", 3);
        let file = CheckpointFile::new(dir.join("counts.checkpoint"));
        assert_eq!(file.read(&tp).unwrap(), Checkpoint::Missing);
        file.write(&tp, 42).unwrap();
        assert_eq!(file.read(&tp).unwrap(), Checkpoint::Offset(42));
        file.write(&tp, 43).unwrap();
        assert_eq!(file.read(&tp).unwrap(), Checkpoint::Offset(43));
        let other = TopicPartition::new("app-counts-changelog", 4);
        assert!(matches!(file.read(&other).unwrap(), Checkpoint::Corrupt(r) if r.contains("-3")));
        file.remove().unwrap();
        file.remove().unwrap();
        assert_eq!(file.read(&tp).unwrap(), Checkpoint::Missing);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn damaged_files_are_corrupt() {
        let tp = TopicPartition::new("a b-changelog", 0);
        assert_eq!(parse(b"0\n1\na b-changelog 0 7\n", &tp), Ok(7));
        for bad in [
            &b""[..],
            b"0\n",
            b"1\n1\na b-changelog 0 7\n",
            b"0\n2\na b-changelog 0 7\n",
            b"0\n1\na b-changelog 0\n",
            b"0\n1\na b-changelog 0 -1\n",
            b"0\n1\na b-changelog 0 7\nextra\n",
            b"0\n1\na b-changelog x 7\n",
            b"\xff\xfe",
        ] {
            assert!(parse(bad, &tp).is_err(), "{bad:?}");
        }
    }
}
