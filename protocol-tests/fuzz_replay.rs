//! The fuzz targets inside the normal test command (issue #9 part 4): every
//! committed corpus input and regression under `fuzz/` is replayed through
//! the targets' own bodies (`fuzz/harness/`), and each target is fed
//! random bytes and mutated corpus inputs. No nightly toolchain needed; a
//! panic here is a fuzz finding.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;

#[path = "../fuzz/harness/mod.rs"]
mod harness;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `fuzz/<kind>/<target>/`, sorted.
fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

/// Each target's corpus inputs, read once.
fn corpus(target: &str) -> &'static [Vec<u8>] {
    static CORPORA: OnceLock<BTreeMap<&'static str, Vec<Vec<u8>>>> = OnceLock::new();
    CORPORA
        .get_or_init(|| {
            harness::TARGETS
                .iter()
                .map(|(name, _)| {
                    let files = inputs("corpus", name).into_iter().map(|(_, b)| b);
                    (*name, files.collect())
                })
                .collect()
        })
        .get(target)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn run_named(target: &str, data: &[u8]) {
    let (_, run) = harness::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no target {target}"));
    run(data);
}

#[test]
fn every_target_has_a_committed_corpus() {
    for (target, _) in harness::TARGETS {
        let n = inputs("corpus", target).len();
        assert!(n > 0, "fuzz/corpus/{target}/ is empty or missing");
    }
}

#[test]
fn committed_corpora_and_regressions_replay_cleanly() {
    for (target, run) in harness::TARGETS {
        for kind in ["corpus", "regressions"] {
            for (path, bytes) in inputs(kind, target) {
                let result = std::panic::catch_unwind(|| run(&bytes));
                assert!(result.is_ok(), "{target}: {} panicked", path.display());
            }
        }
    }
}

fn target_name() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(harness::TARGETS.iter().map(|(n, _)| *n).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random bytes: mostly shallow errors, but cheap.
    #[test]
    fn targets_survive_random_bytes(
        target in target_name(),
        data in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        run_named(target, &data);
    }

    /// Corpus inputs with a few bytes overwritten and the tail cut at a
    /// random point: past the shallow checks, into the deeper decoders.
    #[test]
    fn targets_survive_mutated_corpus_inputs(
        target in target_name(),
        pick in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let corpus = corpus(target);
        prop_assume!(!corpus.is_empty());
        let mut data = corpus[pick.index(corpus.len())].clone();
        if !data.is_empty() {
            for (at, byte) in &edits {
                let i = at.index(data.len());
                data[i] = *byte;
            }
            let end = cut.index(data.len() + 1).max(data.len() / 2);
            data.truncate(end);
        }
        run_named(target, &data);
    }
}
