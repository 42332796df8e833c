//! The agent's one installer of desired state: every part of the data path that runs stages
//! (the FUSE switches, the KV front end, the server level) is a [`Part`], and [`TwoPhase`]
//! installs each applied generation across them, all or nothing, undoing in this one place.
//!
//! 1. **Plan**: the generation is split between the parts ([`plan::Layout`]); a split that
//!    cannot be made (a file rule naming a KV stage) refuses the generation.
//! 2. **Prepare**: every part checks its share without changing anything (the FUSE switch: can
//!    it classify these tenants?). Any refusal refuses the generation, nothing changed.
//! 3. **Commit**, part after part in order (the KV front end, the FUSE switches, then the
//!    server level, so the space the earlier ones free on a shared device is there for the
//!    later ones). Each part's commit is all or nothing for that part (its stage reconciler:
//!    `lachesis_stages::stage::resizes`, the switch's `set_rules`). When one fails, the parts
//!    committed before it are given back their share of the generation last installed
//!    (**abort**), in reverse order, and the generation is refused.
//!
//! The generation machine (`state.rs`) keeps the last installed generation as applied when
//! the install is refused, so what the parts run and what the agent acks agree.

pub mod plan;

use std::sync::{Arc, Mutex};

use tracing::error;

use crate::runner::Installer;
use crate::state::Applied;
use plan::{Layout, Plan};

/// One part of the data path that runs stages.
pub trait Part: Send + Sync {
    /// For errors: "KV front end", "FUSE switch", "server level".
    fn name(&self) -> &'static str;

    /// Checks the part can run its share of `plan`, changing nothing.
    fn prepare(&self, _plan: &Plan) -> Result<(), String> {
        Ok(())
    }

    /// Runs its share of `plan`: on an error this part runs what it ran before.
    fn commit(&self, plan: &Plan) -> Result<(), String>;
}

/// The installer of every applied generation across the data path's parts.
pub struct TwoPhase {
    layout: Layout,
    parts: Vec<Arc<dyn Part>>,
    /// The plan every part runs now (the parts' state before the first generation: empty).
    installed: Mutex<Plan>,
}

impl TwoPhase {
    /// `parts` in commit order.
    pub fn new(layout: Layout, parts: Vec<Arc<dyn Part>>) -> Arc<Self> {
        let installed = Mutex::new(layout.empty());
        Arc::new(TwoPhase {
            layout,
            parts,
            installed,
        })
    }

    /// The plan every part runs now.
    pub fn installed(&self) -> Plan {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.installed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Installer for TwoPhase {
    fn install(&self, applied: &Applied) -> Result<(), String> {
        let mut installed = self.lock();
        let plan = self.layout.plan(applied)?;
        for p in &self.parts {
            p.prepare(&plan).map_err(|e| format!("{}: {e}", p.name()))?;
        }
        for (i, p) in self.parts.iter().enumerate() {
            if let Err(e) = p.commit(&plan) {
                for done in self.parts[..i].iter().rev() {
                    if let Err(back) = done.commit(&installed) {
                        error!(part = done.name(), error = %back,
                               "its previous stages could not be put back after a later part refused");
                    }
                }
                return Err(format!("{}: {e}", p.name()));
            }
        }
        *installed = plan;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
