//! The agent's side of declared maintenance IO (`lachesis-declared`): the host's jobs come
//! from the controller in the string key `lachesis:agent:{host}:declared-io` (polled every
//! second: a changed message replaces the planner's jobs), every mounted switch tells the
//! planner of its reads ([`MountWatch`]), the dispatcher thread reads the rest, and each
//! telemetry report carries the jobs' progress (`declared_io`).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use lachesis_declared::{dispatcher, DeclaredIo, Mount, Planner};
use lachesis_fs::switch::FileCtx;
use lachesis_fs::ReadWatch;
use redis::AsyncConnectionConfig;
use tracing::{info, warn};

/// How often the key is read.
pub const POLL: Duration = Duration::from_secs(1);

/// The switches' IO schedulers, for the dispatcher's reads: each waits as the declared-IO
/// class (the lowest weight) at the scheduler of the switch over its file, so tenants' IO
/// through qos stages goes ahead of maintenance (issue 34). Weak: the planner outlives no
/// data path, and must not keep one alive.
pub struct Schedulers(pub std::sync::Weak<crate::datapath::Datapath>);

impl lachesis_declared::Admit for Schedulers {
    fn admit(&self, backing: &std::path::Path, bytes: u64) -> Option<Box<dyn Send>> {
        let gate = self.0.upgrade()?.scheduler_of(backing)?;
        let slot = gate
            .acquire(&lachesis_fs::qos::ClassKey::Declared, bytes)
            .ok()?;
        Some(Box::new(slot))
    }
}

/// The key the controller keeps the host's jobs in.
pub fn key(host_id: &str) -> String {
    format!("lachesis:agent:{host_id}:declared-io")
}

/// One mount's switch, telling the planner of its reads.
pub struct MountWatch {
    pub planner: Arc<Planner>,
    pub mount: usize,
}

impl ReadWatch for MountWatch {
    fn watches(&self, path: &str) -> bool {
        self.planner.watches(self.mount, path)
    }

    fn read(&self, ctx: &FileCtx, off: u64, data: &[u8]) {
        self.planner.observe(self.mount, &ctx.path, off, data);
    }
}

/// A planner over the agent's mounts (`(backing, mountpoint)`, in `--mount` order), its
/// dispatcher thread (until `stop`) and the task that polls the key.
pub fn start(
    client: redis::Client,
    host_id: String,
    mounts: Vec<(PathBuf, PathBuf)>,
    budget: u64,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Arc<Planner>> {
    let planner = Arc::new(Planner::new(
        mounts
            .into_iter()
            .map(|(backing, mountpoint)| Mount {
                backing,
                mountpoint,
            })
            .collect(),
        budget,
    ));
    dispatcher::spawn(planner.clone(), stop)?;
    tokio::spawn(poll(client, host_id, planner.clone()));
    Ok(planner)
}

async fn poll(client: redis::Client, host_id: String, planner: Arc<Planner>) {
    let key = key(&host_id);
    let mut last: Option<String> = None;
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(3)))
        .set_response_timeout(Some(Duration::from_secs(3)));
    let mut con = None;
    loop {
        tokio::time::sleep(POLL).await;
        if con.is_none() {
            match client
                .get_multiplexed_async_connection_with_config(&cfg)
                .await
            {
                Ok(c) => con = Some(c),
                Err(e) => {
                    warn!(error = %e, "declared IO: cannot reach Redis");
                    continue;
                }
            }
        }
        let Some(c) = con.as_mut() else { continue };
        let text: Option<String> = match redis::cmd("GET").arg(&key).query_async(c).await {
            Ok(t) => t,
            Err(e) => {
                warn!(error = %e, "declared IO: reading {key}");
                con = None;
                continue;
            }
        };
        let text = text.unwrap_or_default();
        if last.as_deref() == Some(text.as_str()) {
            continue;
        }
        last = Some(text.clone());
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<DeclaredIo>(&text) {
            Ok(msg) if msg.host_id != host_id => {
                warn!(host = %msg.host_id, "declared IO: message for another host ignored")
            }
            Ok(msg) => {
                if planner.apply(&msg, time::OffsetDateTime::now_utc()) {
                    info!(
                        version = msg.version,
                        jobs = msg.jobs.len(),
                        "declared IO jobs applied"
                    );
                }
            }
            Err(e) => warn!(error = %e, "declared IO: message refused"),
        }
    }
}
