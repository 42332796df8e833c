//! The switch's counters: per stage, per flow, and the whole switch's (the stats file).

use std::sync::atomic::Ordering;

use lachesis_switch::StageConfig;

use super::Switch;
use crate::stage::StageStats;

impl Switch {
    /// Every declared stage's counters (Moirai's getCacheStats), by name.
    pub fn stage_stats(&self) -> Vec<StageStats> {
        let set = self.registry.current();
        let mut out: Vec<StageStats> = set
            .iter()
            .map(|(name, live)| {
                let mut s = live.stage.counters();
                s.name = name.clone();
                s.kind = live.config.kind().to_string();
                s.owner = live.config.owner().map(str::to_string);
                if let StageConfig::Cache(c) = &live.config {
                    s.engine = Some(c.engine);
                    s.size_bytes = c.size_bytes;
                }
                s
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Stage counters and delegate state, for the stats file.
    pub fn stats(&self) -> serde_json::Value {
        let set = self.registry.current();
        let mut names: Vec<&String> = set.keys().collect();
        names.sort();
        let stages: Vec<_> = names
            .into_iter()
            .map(|n| {
                let live = &set[n];
                let owner = live.config.owner();
                // `tenant` and `target`: the owner and the name, as before stages were named.
                serde_json::json!({"name": n, "kind": live.config.kind(), "owner": owner,
                    "tenant": owner, "target": n, "stats": live.stage.stats()})
            })
            .collect();
        let c = self.current();
        let flows: serde_json::Map<_, _> = c
            .table
            .rules()
            .map(|r| {
                let c = self.gates.counts(&r.name);
                (
                    r.name.clone(),
                    serde_json::json!({
                        "quiesced": self.gates.is_quiesced(&r.name),
                        "in_flight": c.in_flight,
                        "admitted": c.admitted,
                        "waiting": c.waiting,
                    }),
                )
            })
            .collect();
        serde_json::json!({
            "stages": stages,
            "flows": flows,
            "detours": self.detours.as_ref().map(|d| d.stats()),
            "header_logs": self.registry.header_logs().iter().map(|l| serde_json::json!({
                "file": l.path(),
                "appended": l.appended.load(Ordering::Relaxed),
                "failed": l.failed.load(Ordering::Relaxed),
            })).collect::<Vec<_>>(),
            "reconcile_errors": self.reconcile_errors.load(Ordering::Relaxed),
            "user_bytes_read": self.user_read.load(Ordering::Relaxed),
            "user_bytes_written": self.user_written.load(Ordering::Relaxed),
            "block_lock_waits": self.blocks.waits(),
        })
    }
}
