//! Handles on the maps user space reads and writes.
//!
//! [`MetricsMaps`] is what the tenant ([`crate::tenants`]) and counter
//! ([`crate::counters`]) APIs hang off. It is `Send + Sync` (map file
//! descriptors only), so the agent can share it across tasks. It comes
//! either from a loaded [`crate::EbpfMetrics`] (which dereferences to it)
//! or from the pins of a running agent ([`MetricsMaps::open_pinned`]).

use crate::error::{Error, Result};
use crate::loader::PINNED_MAPS;
use crate::tenants::TenantId;
use libbpf_rs::{MapCore, MapHandle};
use std::path::Path;
use std::sync::Mutex;

pub struct MetricsMaps {
    pub(crate) stats: MapHandle,
    pub(crate) tenant_cfg: MapHandle,
    pub(crate) cgroup_tenants: MapHandle,
    pub(crate) state: MapHandle,
    max_tenants: u32,
    /// Serialises read-modify-write updates (the generation counter, a
    /// tenant's config) from this process.
    pub(crate) write_lock: Mutex<()>,
}

impl std::fmt::Debug for MetricsMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsMaps")
            .field("max_tenants", &self.max_tenants)
            .finish_non_exhaustive()
    }
}

impl MetricsMaps {
    pub(crate) fn new(
        stats: MapHandle,
        tenant_cfg: MapHandle,
        cgroup_tenants: MapHandle,
        state: MapHandle,
        max_tenants: u32,
    ) -> Self {
        MetricsMaps {
            stats,
            tenant_cfg,
            cgroup_tenants,
            state,
            max_tenants,
            write_lock: Mutex::new(()),
        }
    }

    /// Open the maps a running agent pinned under `dir` (see
    /// [`crate::LoadOptions::pin_dir`]). Used by `lachesis-top`.
    pub fn open_pinned(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            MapHandle::from_pinned_path(dir.join(name)).map_err(|e| Error::NotPinned {
                path: dir.to_path_buf(),
                message: format!("{name}: {e}"),
            })
        };
        let [s, c, g, st] = PINNED_MAPS;
        let stats = open(s)?;
        let max_tenants = stats.max_entries();
        Ok(MetricsMaps::new(
            stats,
            open(c)?,
            open(g)?,
            open(st)?,
            max_tenants,
        ))
    }

    /// Tenant slots: valid tenant ids are `0..max_tenants()`.
    pub fn max_tenants(&self) -> u32 {
        self.max_tenants
    }

    pub(crate) fn handles_for_pinning(&self) -> [&MapHandle; 4] {
        [
            &self.stats,
            &self.tenant_cfg,
            &self.cgroup_tenants,
            &self.state,
        ]
    }

    pub(crate) fn check_tenant(&self, tenant: TenantId) -> Result<()> {
        if tenant >= self.max_tenants {
            return Err(Error::TenantOutOfRange {
                tenant,
                max: self.max_tenants,
            });
        }
        Ok(())
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // A panic while holding the lock leaves no broken invariant behind
        // (the maps are the state), so a poisoned lock is still usable.
        self.write_lock.lock().unwrap_or_else(|p| p.into_inner())
    }
}
