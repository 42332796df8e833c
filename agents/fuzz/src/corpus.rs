//! Where each target's seeds are: its committed corpus, `agents/fuzz/corpus/<target>/`, and
//! for bus messages the contract's fixtures, `api-schemas/fixtures/<message>/` (read in place,
//! not copied). cargo-fuzz is given the same folders.

use std::path::{Path, PathBuf};

/// `agents/fuzz/corpus/<target>`.
pub fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

/// `api-schemas/fixtures/<message>`.
pub fn fixtures(message: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../api-schemas/fixtures")
        .join(message)
}

/// One seed and where it came from.
#[derive(Debug, Clone)]
pub struct Seed {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// Every file of `dirs`, in name order. A missing or empty folder panics: a corpus that is not
/// there must fail the suite, not let it pass having fuzzed nothing.
pub fn load(dirs: &[PathBuf]) -> Vec<Seed> {
    let mut seeds = Vec::new();
    for d in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap_or_else(|e| panic!("corpus folder {}: {e}", d.display()))
            .map(|e| e.expect("corpus folder entry").path())
            .filter(|p| p.is_file())
            .collect();
        assert!(!files.is_empty(), "corpus folder {} is empty", d.display());
        files.sort();
        for path in files {
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("corpus file {}: {e}", path.display()));
            seeds.push(Seed { path, bytes });
        }
    }
    seeds
}
