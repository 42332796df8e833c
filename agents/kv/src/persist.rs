//! Warm restart: what a clean shutdown leaves in the state dir, and how a start uses it.
//!
//! `kv-warm.json` records, per flash cache stage, its config, device and the pool regions it
//! held, and the next CAS unique; `kv-index-<i>.bin` is that stage's hybrid index
//! (`lachesis_cache::persist`: DRAM front written to flash first, then the log's and
//! Kangaroo's DRAM state). A start reads every file and removes it before any cache is
//! built, so a later crash never finds them: after a crash every cache starts empty. A cache
//! stage whose config, device and regions match its record and whose index restores comes
//! back warm; any other starts empty.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lachesis_cache::persist::IndexFile;
use lachesis_switch::CacheConfig;
use serde::{Deserialize, Serialize};

use crate::store::Store;

const FILE: &str = "kv-warm.json";

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    config: CacheConfig,
    device: String,
    regions: Vec<u32>,
    index: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    next_unique: u64,
    stages: Vec<Record>,
}

/// What the last clean shutdown left (nothing after a crash or on a first start).
#[derive(Default)]
pub struct Warm {
    next_unique: u64,
    /// By stage name: the record and its index, each handed out at most once.
    found: Mutex<HashMap<String, (Record, Vec<u8>)>>,
}

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

fn index_file(dir: &Path, i: usize) -> String {
    dir.join(format!("kv-index-{i}.bin")).display().to_string()
}

impl Warm {
    /// Reads and removes the state file and the indexes it names.
    pub fn load(dir: Option<&Path>) -> Result<Warm, String> {
        let Some(dir) = dir else {
            return Ok(Warm::default());
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("state dir {}: {e}", dir.display()))?;
        let p = path(dir);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Warm::default()),
            Err(e) => return Err(format!("{}: {e}", p.display())),
        };
        std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        // A record that does not parse is a cold start, not a failure to start.
        let state: State = serde_json::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!("{}: {e}; every cache starts empty", p.display());
            State::default()
        });
        let mut found = HashMap::new();
        for r in state.stages {
            if let Some(index) = IndexFile::new(&r.index).take().map_err(|e| e.to_string())? {
                found.insert(r.config.name.clone(), (r, index));
            }
        }
        Ok(Warm {
            next_unique: state.next_unique,
            found: Mutex::new(found),
        })
    }

    pub fn next_unique(&self) -> u64 {
        self.next_unique
    }

    /// The saved regions and index of the stage `config`, if its record matches it
    /// (config and device); handed out once.
    pub fn take(&self, config: &CacheConfig, device: &str) -> Option<crate::cache::Saved> {
        let mut f = self.found.lock().unwrap_or_else(|p| p.into_inner());
        let (r, index) = f.remove(&config.name)?;
        (r.config == *config && r.device == device).then_some((r.regions, index))
    }
}

/// Writes each flash cache's index and the state file naming them (last, so a state file
/// is only there when every index it names is whole).
pub fn save(dir: Option<&Path>, stores: &[Arc<Store>], next_unique: u64) -> Result<(), String> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let mut stages = Vec::new();
    for (i, f) in stores.iter().filter_map(|s| s.cache().flash()).enumerate() {
        let Some((regions, index)) = f.save()? else {
            continue;
        };
        let file = index_file(dir, i);
        IndexFile::new(&file)
            .save(|w| {
                w.write_all(&index)
                    .map_err(|e| lachesis_cache::Error::Persist(e.to_string()))
            })
            .map_err(|e| e.to_string())?;
        stages.push(Record {
            config: f.config().clone(),
            device: f.space().pool().name().to_string(),
            regions,
            index: file,
        });
    }
    let state = State {
        next_unique,
        stages,
    };
    let p = path(dir);
    let tmp = dir.join(format!("{FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&state).map_err(|e| e.to_string())?)
        .and_then(|_| std::fs::rename(&tmp, &p))
        .map_err(|e| format!("{}: {e}", p.display()))
}
