//! The server level of a standalone `lachesis-fs serve` (a storage server without an agent):
//! one cache stage in front of its store, from the command line instead of desired state
//! ([`CachedStore`]), and its counters written to a stats file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lachesis_switch::stage::serve_dir_error;
use lachesis_switch::{CacheConfig, CacheEngine, Eviction, WriteMode};

use super::cached_store::CachedStore;
use super::server::Store;
use crate::stage::Devices;

/// The stage's name in the stats file (a standalone server has no desired state).
pub const STAGE: &str = "cache/serve";

/// `lachesis-fs serve`'s server-level flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeLevelArgs {
    /// Run a server-level cache of this many bytes in front of the store (two-level
    /// caches; absent: none).
    #[arg(long, value_name = "BYTES")]
    pub cache_bytes: Option<u64>,
    /// The server level's engine: dram, loc, kangaroo, hybrid, fairywren or hybrid-fairywren
    /// (the flash ones on --device).
    #[arg(long, value_name = "ENGINE", default_value = "dram", value_parser = parse_engine)]
    pub cache_engine: CacheEngine,
    /// Directories under --root whose reads the server level caches (repeatable)
    /// [default: the whole root].
    #[arg(long = "cache-serves", value_name = "DIR")]
    pub cache_serves: Vec<String>,
    /// Exclusive of level 1 (Moirai's global LRU): the reads of a level 1 that demotes do
    /// not fill it, and it holds the blocks level 1 evicts and demotes to it.
    #[arg(long)]
    pub cache_exclusive: bool,
    /// A device a flash engine lives on, NAME=SPEC as `mount --device` (repeatable; the
    /// first is the one used).
    #[arg(long = "device", value_name = "NAME=SPEC")]
    pub devices: Vec<String>,
    /// Written every 250 ms with the server level's counters and what reached the store
    /// (without --cache-bytes, what reached the store only), numbered (`snapshot`) as
    /// `mount --stats`.
    #[arg(long)]
    pub stats: Option<PathBuf>,
}

fn parse_engine(s: &str) -> Result<CacheEngine, String> {
    serde_json::from_value(serde_json::Value::String(s.into())).map_err(|_| {
        format!("{s:?}: expected dram, loc, kangaroo, hybrid, fairywren or hybrid-fairywren")
    })
}

impl ServeLevelArgs {
    /// The stage the flags describe; `None` without --cache-bytes. Flags that need
    /// --cache-bytes without it are refused, naming them.
    pub fn config(&self) -> Result<Option<CacheConfig>, String> {
        let Some(size) = self.cache_bytes else {
            let stray = [
                (!self.cache_serves.is_empty(), "--cache-serves"),
                (self.cache_exclusive, "--cache-exclusive"),
                (self.cache_engine != CacheEngine::Dram, "--cache-engine"),
                (!self.devices.is_empty(), "--device"),
            ];
            return match stray.iter().find(|(set, _)| *set) {
                Some((_, flag)) => Err(format!("{flag} needs --cache-bytes")),
                None => Ok(None),
            };
        };
        if size == 0 {
            return Err("--cache-bytes must be at least 1".into());
        }
        let serves = if self.cache_serves.is_empty() {
            vec![String::new()]
        } else {
            self.cache_serves
                .iter()
                .map(|d| d.trim_matches('/').to_string())
                .collect()
        };
        if let Some(why) = serves.iter().find_map(|d| serve_dir_error(d)) {
            return Err(format!("--cache-serves: {why}"));
        }
        if self.cache_engine.on_flash() && self.devices.is_empty() {
            return Err(format!(
                "--cache-engine {:?} needs a --device",
                self.cache_engine
            ));
        }
        Ok(Some(CacheConfig {
            name: STAGE.into(),
            owner: None,
            engine: self.cache_engine,
            size_bytes: size,
            write_mode: WriteMode::Through,
            eviction: Eviction::Lru,
            max_dirty_bytes: 16 << 20,
            device: None,
            placement: vec![],
            next: None,
            serves: Some(serves),
            exclusive: self.cache_exclusive,
        }))
    }

    /// `store` with the server level in front when the flags ask for one (on `devices`,
    /// opened from `self.devices`), and the stats writer started.
    pub fn build(&self, store: Arc<dyn Store>, devices: Devices) -> Result<Arc<dyn Store>, String> {
        let config = self.config()?;
        if config.is_none() && self.stats.is_none() {
            return Ok(store);
        }
        // Without a stage every read goes to the store, counted: the stats file's baseline.
        let cached = Arc::new(CachedStore::new(store, devices));
        cached.set_stages(config.as_slice())?;
        if let Some(path) = self.stats.clone() {
            let c = cached.clone();
            std::thread::Builder::new()
                .name("serve-stats".into())
                .spawn(move || write_stats(&c, &path))
                .map_err(|e| format!("--stats: {e}"))?;
        }
        Ok(cached)
    }
}

/// Writes the stats file every 250 ms, numbered: taken, written and renamed in turn, so a
/// reader that sees snapshot n knows snapshot n + 2 was taken after it looked.
fn write_stats(store: &CachedStore, path: &std::path::Path) {
    let tmp = path.with_extension("tmp");
    for snapshot in 0u64.. {
        let mut stats = store.stats();
        stats["snapshot"] = snapshot.into();
        let body = serde_json::to_vec_pretty(&stats).unwrap_or_default();
        if std::fs::write(&tmp, body)
            .and_then(|_| std::fs::rename(&tmp, path))
            .is_err()
        {
            tracing::warn!("cannot write stats to {}", path.display());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: impl FnOnce(&mut ServeLevelArgs)) -> ServeLevelArgs {
        let mut a = ServeLevelArgs {
            cache_bytes: None,
            cache_engine: CacheEngine::Dram,
            cache_serves: vec![],
            cache_exclusive: false,
            devices: vec![],
            stats: None,
        };
        f(&mut a);
        a
    }

    #[test]
    fn flags_make_one_stage_and_bad_ones_are_refused_by_name() {
        assert_eq!(args(|_| {}).config().unwrap(), None);
        let c = args(|a| {
            a.cache_bytes = Some(1 << 20);
            a.cache_serves = vec!["media/".into(), "b/c".into()];
            a.cache_exclusive = true;
        })
        .config()
        .unwrap()
        .unwrap();
        assert_eq!(c.serves, Some(vec!["media".into(), "b/c".into()]));
        assert!(c.exclusive && c.engine == CacheEngine::Dram && c.size_bytes == 1 << 20);
        let whole = args(|a| a.cache_bytes = Some(4096))
            .config()
            .unwrap()
            .unwrap();
        assert_eq!(whole.serves, Some(vec![String::new()]));
        for (f, want) in [
            (
                args(|a| a.cache_exclusive = true),
                "--cache-exclusive needs --cache-bytes",
            ),
            (
                args(|a| a.cache_serves = vec!["x".into()]),
                "--cache-serves needs --cache-bytes",
            ),
            (args(|a| a.cache_bytes = Some(0)), "at least 1"),
            (
                args(|a| {
                    a.cache_bytes = Some(1);
                    a.cache_serves = vec!["a/../b".into()];
                }),
                "--cache-serves",
            ),
            (
                args(|a| {
                    a.cache_bytes = Some(1 << 20);
                    a.cache_engine = CacheEngine::Loc;
                }),
                "needs a --device",
            ),
        ] {
            let e = f.config().unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert!(parse_engine("hybrid-fairywren").is_ok());
        assert!(parse_engine("ssd").unwrap_err().contains("expected dram"));
    }
}
