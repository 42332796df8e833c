//! Warm restart: what a clean shutdown leaves in the state dir, and how a start uses it.
//!
//! `kv-warm.json` records, per flash cache stage, its config and the span it held (device,
//! regions), and the next CAS unique. At start the file is read and removed at once, so a
//! later crash never finds it: after a crash every cache starts empty. A cache stage whose
//! config and span match its record comes back warm; any other starts empty.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lachesis_switch::CacheConfig;
use serde::{Deserialize, Serialize};

use crate::store::Store;

const FILE: &str = "kv-warm.json";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Record {
    config: Option<CacheConfig>,
    device: String,
    installed: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    next_unique: u64,
    stages: Vec<Record>,
}

/// What the last clean shutdown left (nothing after a crash or on a first start).
#[derive(Default)]
pub struct Warm {
    state: Option<State>,
}

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

impl Warm {
    /// Reads and removes the state file.
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
        Ok(Warm {
            state: serde_json::from_str(&text).ok(),
        })
    }

    pub fn next_unique(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.next_unique)
    }

    /// Restores `store`'s engine when a record matches it (until the engines can save and
    /// restore their index, nothing is restored: every cache starts empty).
    pub fn restore(&self, _config: &CacheConfig, _store: &Arc<Store>) -> Result<(), String> {
        Ok(())
    }
}

/// Writes the state file for `stores` (the flash caches).
pub fn save(dir: Option<&Path>, stores: &[Arc<Store>], next_unique: u64) -> Result<(), String> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let stages = stores
        .iter()
        .filter_map(|s| s.cache().flash())
        .map(|f| Record {
            config: Some(f.config().clone()),
            device: f.space().pool().name().to_string(),
            installed: f.installed(),
        })
        .collect();
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
