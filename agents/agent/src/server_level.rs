//! The agent's forwarding server (`lachesis-agent run --serve-listen ADDR --serve-root DIR`):
//! answers the IO other agents' remote endpoints (`tcp://HOST:PORT/dir`) forward to it, from
//! DIR, with the server level of two-level caches in front (Moirai §5.3.5): the desired
//! state's cache stages with `serves` run here, in a [`CachedStore`], not in the FUSE switch.
//!
//! An agent without a server still builds its server-level stages (they are reported, so the
//! controller sees them installed) and warns that no request reaches them.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

use lachesis_fs::remote::auth::Key;
use lachesis_fs::serve::cached_store::CachedStore;
use lachesis_fs::serve::server::{self, DirStore, Store};
use lachesis_fs::stage::Devices;
use tracing::{info, warn};

use crate::install::plan::Plan;
use crate::install::Part;
use crate::telemetry::{StageKindReport, StageTelemetry};

/// The store of an agent that runs no server: nothing is forwarded to it.
struct NoStore;

impl Store for NoStore {
    fn read(&self, _: &str, _: u64, _: usize) -> std::io::Result<Vec<u8>> {
        Err(std::io::Error::from(std::io::ErrorKind::NotConnected))
    }
    fn write(&self, _: &str, _: u64, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::NotConnected))
    }
    fn sync(&self, _: &str) -> std::io::Result<()> {
        Ok(())
    }
    fn truncate(&self, _: &str, _: u64) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::NotConnected))
    }
    fn size(&self, _: &str) -> std::io::Result<u64> {
        Ok(0)
    }
    fn rename(&self, _: &str, _: &str) -> std::io::Result<()> {
        Ok(())
    }
}

pub struct ServerLevel {
    store: Arc<CachedStore>,
    serving: bool,
}

impl ServerLevel {
    /// Listens on `listen` and serves `root` when both are given (with `key`, peers must
    /// authenticate); flash engines of server-level stages take their space on `devices`.
    pub fn start(
        listen: Option<&str>,
        root: Option<&Path>,
        key: Option<Key>,
        devices: Devices,
    ) -> Result<Arc<Self>, String> {
        let (store, listener): (Arc<dyn Store>, _) = match (listen, root) {
            (Some(l), Some(r)) => {
                let store = DirStore::new(r).map_err(|e| format!("--serve-root: {e}"))?;
                let listener =
                    TcpListener::bind(l).map_err(|e| format!("--serve-listen {l}: {e}"))?;
                (Arc::new(store), Some(listener))
            }
            (None, None) => (Arc::new(NoStore), None),
            _ => return Err("--serve-listen and --serve-root go together".into()),
        };
        let level = Arc::new(ServerLevel {
            store: Arc::new(CachedStore::new(store, devices)),
            serving: listener.is_some(),
        });
        if let Some(listener) = listener {
            let addr = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            info!(authenticated = key.is_some(), root = %root.unwrap_or(Path::new("")).display(),
                  "forwarding server on {addr}");
            let store: Arc<dyn Store> = level.store.clone();
            std::thread::Builder::new()
                .name("serve".into())
                .spawn(move || {
                    if let Err(e) = server::serve(listener, store, key) {
                        warn!("forwarding server stopped: {e}");
                    }
                })
                .map_err(|e| format!("--serve-listen: {e}"))?;
        }
        Ok(level)
    }

    /// The server-level stages' counters, in telemetry's form.
    pub fn stage_reports(&self) -> Vec<StageTelemetry> {
        self.store
            .stage_stats()
            .into_iter()
            .map(|s| StageTelemetry {
                name: s.name,
                kind: StageKindReport::Cache,
                owner: s.owner,
                engine: s.engine,
                size_bytes: Some(s.size_bytes),
                installed_bytes: Some(s.installed_bytes),
                hits: Some(s.hits),
                misses: Some(s.misses),
                bytes_read_hit: Some(s.bytes_read_hit),
                bytes_read_miss: Some(s.bytes_read_miss),
                bytes_written: Some(s.bytes_written),
                evictions: Some(s.evictions),
                demoted_blocks: Some(s.demoted_blocks),
                demotion_hits: Some(s.demotion_hits),
                ..Default::default()
            })
            .collect()
    }

    /// Bytes of reads that reached the served directory (the store), for the stats file
    /// and tests.
    pub fn store(&self) -> &CachedStore {
        &self.store
    }
}

impl Part for ServerLevel {
    fn name(&self) -> &'static str {
        "server level"
    }

    /// Committed after the FUSE switch and the KV front end, which may have shrunk or dropped
    /// stages and given back device space the server level takes. All or nothing.
    fn commit(&self, plan: &Plan) -> Result<(), String> {
        if !plan.server.is_empty() && !self.serving {
            warn!(stages = ?plan.server.iter().map(|c| &c.name).collect::<Vec<_>>(),
                  "server-level cache stages built, but this agent runs no forwarding server (--serve-listen): no request reaches them");
        }
        Ok(self.store.set_stages(&plan.server)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::plan::server_level;
    use lachesis_switch::StageConfig;

    fn stages() -> Vec<StageConfig> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../api-schemas/fixtures/desired-state/valid-stages-server-level.json"
        ))
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        serde_json::from_value(v["stages"].clone()).unwrap()
    }

    #[test]
    fn an_agent_without_a_server_builds_and_reports_them() {
        let level = ServerLevel::start(None, None, None, Devices::default()).unwrap();
        let (server, _) = server_level(&stages());
        level.store.set_stages(&server).unwrap();
        let r = level.stage_reports();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].size_bytes, r[0].installed_bytes),
            (Some(402653184), Some(402653184))
        );
        let e = ServerLevel::start(Some("127.0.0.1:0"), None, None, Devices::default())
            .err()
            .unwrap();
        assert!(e.contains("--serve-root"), "{e}");
    }
}
