//! Tenants: the cgroup → tenant map and per-tenant SHARDS thresholds.
//!
//! The controller's tenant classifier becomes entries in `cgroup_tenants`
//! (cgroup v2 id → tenant id). A mapped cgroup also owns its descendants:
//! the kernel walks up to the nearest mapped ancestor once per cgroup and
//! caches the answer, and every change here bumps a generation number that
//! invalidates that cache.

use crate::error::{Error, Result};
use crate::layout::{
    as_bytes, from_bytes, zeroed, RawCgroupTenant, RawState, RawTenantCfg, RawTenantStats, NAME_LEN,
};
use crate::maps::MetricsMaps;
use lachesis_switch::cgroup::Cgroup2Mount;
use libbpf_rs::{MapCore, MapFlags};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Tenant slot, `0..max_tenants`. The agent assigns them.
pub type TenantId = u32;

/// SHARDS modulus: thresholds are in `0..=SHARDS_P`, rate `R = T / P`.
pub const SHARDS_P: u32 = 1 << 24;

/// Threshold for sampling rate `rate` (0 disables sampling; clamped to 1).
/// Agrees with `lachesis_mrc::hash::threshold_for_rate` for rates > 0.
pub fn threshold_for_rate(rate: f64) -> u32 {
    if rate.is_nan() || rate <= 0.0 {
        return 0;
    }
    lachesis_mrc::hash::threshold_for_rate(rate.min(1.0)) as u32
}

/// Sampling rate of threshold `t`.
pub fn rate_of_threshold(t: u32) -> f64 {
    t.min(SHARDS_P) as f64 / SHARDS_P as f64
}

const CFG_CONFIGURED: u32 = 1;

/// What the kernel knows about a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantConfig {
    pub name: String,
    /// SHARDS threshold; see [`rate_of_threshold`].
    pub threshold: u32,
}

impl MetricsMaps {
    /// Create or update tenant `tenant`: its display name (truncated to 55
    /// bytes) and SHARDS threshold (0 = no sampling).
    pub fn set_tenant(&self, tenant: TenantId, name: &str, threshold: u32) -> Result<()> {
        self.check_tenant(tenant)?;
        check_threshold(threshold)?;
        let _g = self.lock();
        let mut cfg: RawTenantCfg = zeroed();
        cfg.threshold = threshold;
        cfg.flags = CFG_CONFIGURED;
        let n = floor_char_boundary(name, NAME_LEN - 1);
        cfg.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        self.write_cfg(tenant, &cfg)
    }

    /// The primitive the issue names: map `cgroup_id` to `tenant` and set
    /// the tenant's threshold (its name becomes `tenant-<id>` if it had
    /// none).
    pub fn set_cgroup_tenant(
        &self,
        cgroup_id: u64,
        tenant: TenantId,
        threshold: u32,
    ) -> Result<()> {
        self.check_tenant(tenant)?;
        check_threshold(threshold)?;
        let name = match self.tenant_config(tenant)? {
            Some(c) if !c.name.is_empty() => c.name,
            _ => format!("tenant-{tenant}"),
        };
        self.set_tenant(tenant, &name, threshold)?;
        self.map_cgroup(cgroup_id, tenant)
    }

    /// The tenant's configuration, None if the slot is unused.
    pub fn tenant_config(&self, tenant: TenantId) -> Result<Option<TenantConfig>> {
        self.check_tenant(tenant)?;
        let cfg = self.read_cfg(tenant)?;
        if cfg.flags & CFG_CONFIGURED == 0 {
            return Ok(None);
        }
        let len = cfg.name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        Ok(Some(TenantConfig {
            name: String::from_utf8_lossy(&cfg.name[..len]).into_owned(),
            threshold: cfg.threshold,
        }))
    }

    /// Every configured tenant.
    pub fn tenants(&self) -> Result<Vec<(TenantId, TenantConfig)>> {
        let mut out = Vec::new();
        for t in 0..self.max_tenants() {
            if let Some(c) = self.tenant_config(t)? {
                out.push((t, c));
            }
        }
        Ok(out)
    }

    /// Current SHARDS threshold of `tenant` (0 if unconfigured).
    pub fn threshold(&self, tenant: TenantId) -> Result<u32> {
        self.check_tenant(tenant)?;
        Ok(self.read_cfg(tenant)?.threshold)
    }

    /// Set the SHARDS threshold; takes effect for the next bio.
    pub fn set_threshold(&self, tenant: TenantId, threshold: u32) -> Result<()> {
        self.update_threshold(tenant, threshold, |_, new| new)
            .map(|_| ())
    }

    /// Lower the threshold to `threshold` if it is below the current one
    /// (fixed-size SHARDS only ever lowers it). Returns the threshold now
    /// in force.
    pub fn lower_threshold(&self, tenant: TenantId, threshold: u32) -> Result<u32> {
        self.update_threshold(tenant, threshold, |cur, new| cur.min(new))
    }

    fn update_threshold(
        &self,
        tenant: TenantId,
        threshold: u32,
        f: impl Fn(u32, u32) -> u32,
    ) -> Result<u32> {
        self.check_tenant(tenant)?;
        check_threshold(threshold)?;
        let _g = self.lock();
        let mut cfg = self.read_cfg(tenant)?;
        let t = f(cfg.threshold, threshold);
        if t != cfg.threshold {
            cfg.threshold = t;
            cfg.flags |= CFG_CONFIGURED;
            self.write_cfg(tenant, &cfg)?;
        }
        Ok(t)
    }

    /// Map cgroup `cgroup_id` (and its descendants without a mapping of
    /// their own) to `tenant`.
    pub fn map_cgroup(&self, cgroup_id: u64, tenant: TenantId) -> Result<()> {
        self.check_tenant(tenant)?;
        let v = RawCgroupTenant { tenant, _pad: 0 };
        let _g = self.lock();
        self.cgroup_tenants
            .update(as_bytes(&cgroup_id), as_bytes(&v), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "cgroup_tenants",
                op: "update",
                source,
            })?;
        self.bump_generation()
    }

    /// Remove a cgroup's mapping. Returns whether there was one.
    pub fn unmap_cgroup(&self, cgroup_id: u64) -> Result<bool> {
        let _g = self.lock();
        let existed = self
            .cgroup_tenants
            .lookup(as_bytes(&cgroup_id), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "cgroup_tenants",
                op: "lookup",
                source,
            })?
            .is_some();
        if existed {
            self.cgroup_tenants
                .delete(as_bytes(&cgroup_id))
                .map_err(|source| Error::Map {
                    map: "cgroup_tenants",
                    op: "delete",
                    source,
                })?;
            self.bump_generation()?;
        }
        Ok(existed)
    }

    /// Every cgroup mapping, as (cgroup id, tenant).
    pub fn cgroup_mappings(&self) -> Result<Vec<(u64, TenantId)>> {
        let mut out = Vec::new();
        for key in self.cgroup_tenants.keys() {
            let Some(id) = from_bytes::<u64>(&key) else {
                continue;
            };
            let v = self
                .cgroup_tenants
                .lookup(&key, MapFlags::ANY)
                .map_err(|source| Error::Map {
                    map: "cgroup_tenants",
                    op: "lookup",
                    source,
                })?;
            if let Some(v) = v.as_deref().and_then(from_bytes::<RawCgroupTenant>) {
                out.push((id, v.tenant));
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Forget a tenant: unmap its cgroups, clear its config and zero its
    /// counters, so the slot can be reused.
    pub fn remove_tenant(&self, tenant: TenantId) -> Result<()> {
        self.check_tenant(tenant)?;
        for (cg, t) in self.cgroup_mappings()? {
            if t == tenant {
                self.unmap_cgroup(cg)?;
            }
        }
        let _g = self.lock();
        self.write_cfg(tenant, &zeroed())?;
        let zero: RawTenantStats = zeroed();
        let cpus = libbpf_rs::num_possible_cpus().map_err(|source| Error::Map {
            map: "stats",
            op: "count cpus",
            source,
        })?;
        let values = vec![as_bytes(&zero).to_vec(); cpus];
        self.stats
            .update_percpu(as_bytes(&tenant), &values, MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "stats",
                op: "zero",
                source,
            })
    }

    fn read_cfg(&self, tenant: TenantId) -> Result<RawTenantCfg> {
        let v = self
            .tenant_cfg
            .lookup(as_bytes(&tenant), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "tenant_cfg",
                op: "lookup",
                source,
            })?;
        Ok(v.as_deref().and_then(from_bytes).unwrap_or_else(zeroed))
    }

    fn write_cfg(&self, tenant: TenantId, cfg: &RawTenantCfg) -> Result<()> {
        self.tenant_cfg
            .update(as_bytes(&tenant), as_bytes(cfg), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "tenant_cfg",
                op: "update",
                source,
            })
    }

    /// Caller holds the write lock.
    fn bump_generation(&self) -> Result<()> {
        let zero = 0u32;
        let cur: RawState = self
            .state
            .lookup(as_bytes(&zero), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "state",
                op: "lookup",
                source,
            })?
            .as_deref()
            .and_then(from_bytes)
            .unwrap_or_else(zeroed);
        let next = RawState {
            generation: cur.generation.wrapping_add(1),
            _pad: 0,
        };
        self.state
            .update(as_bytes(&zero), as_bytes(&next), MapFlags::ANY)
            .map_err(|source| Error::Map {
                map: "state",
                op: "update",
                source,
            })
    }
}

fn check_threshold(t: u32) -> Result<()> {
    if t > SHARDS_P {
        return Err(Error::BadThreshold(t));
    }
    Ok(())
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

const CGROUP2_SUPER_MAGIC: i64 = 0x63677270;

/// Where cgroup v2 is mounted (`/sys/fs/cgroup` on a pure v2 host,
/// `/sys/fs/cgroup/unified` on a hybrid one), from /proc/self/mountinfo.
pub fn cgroup2_mount() -> Result<PathBuf> {
    Ok(PathBuf::from(mount()?.mount_point))
}

fn mount() -> Result<Cgroup2Mount> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    Cgroup2Mount::from_mountinfo(&info).ok_or(Error::NoCgroup2)
}

/// Turn a tenant classifier's cgroup path into a directory. The value means what it means at
/// the FUSE switch (`lachesis_switch::cgroup`): a cgroup v2 path relative to the cgroup2 root,
/// as /proc/PID/cgroup shows it (`/kubepods/pod1` → `/sys/fs/cgroup/unified/kubepods/pod1` on
/// a hybrid host). A host path (`/sys/fs/cgroup/web`) is refused, not looked up: taken as a
/// directory it would count a tenant the switch never recognises.
pub fn cgroup_dir(classifier: &str) -> Result<PathBuf> {
    let mount = mount()?;
    cgroup_dir_in(classifier, &mount)
}

/// [`cgroup_dir`] under the cgroup2 mount `mount`, without checking that the directory exists.
pub fn cgroup_dir_in(classifier: &str, mount: &Cgroup2Mount) -> Result<PathBuf> {
    let refused = |message: String| Error::Cgroup {
        path: PathBuf::from(classifier),
        message,
    };
    lachesis_switch::cgroup::check_classifier(classifier, Some(mount)).map_err(refused)?;
    let dir = mount.dir_of(classifier).ok_or_else(|| {
        refused(format!(
            "outside the cgroup2 mount at {} (of cgroup {})",
            mount.mount_point, mount.root
        ))
    })?;
    if !is_cgroup2(&dir) {
        return Err(Error::Cgroup {
            path: dir,
            message: "no such cgroup v2 directory".into(),
        });
    }
    Ok(dir)
}

fn is_cgroup2(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the zeroed struct we own; c is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC
}

/// The cgroup v2 id of a cgroup directory: what `bpf_get_current_cgroup_id()`
/// returns for its tasks. On 64-bit kernels it is the directory's inode
/// number (kernfs node id).
pub fn cgroup_id(dir: &Path) -> Result<u64> {
    if !is_cgroup2(dir) {
        return Err(Error::Cgroup {
            path: dir.to_path_buf(),
            message: "not a cgroup v2 directory".into(),
        });
    }
    let md = std::fs::metadata(dir).map_err(|e| Error::Cgroup {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(md.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_round_trip() {
        assert_eq!(threshold_for_rate(0.0), 0);
        assert_eq!(threshold_for_rate(1.0), SHARDS_P);
        assert_eq!(threshold_for_rate(7.0), SHARDS_P);
        let t = threshold_for_rate(0.01);
        assert!((rate_of_threshold(t) - 0.01).abs() < 1e-6);
    }

    #[test]
    fn names_truncate_on_char_boundaries() {
        assert_eq!(floor_char_boundary("abc", 55), 3);
        let s = "é".repeat(40); // 80 bytes
        let n = floor_char_boundary(&s, 55);
        assert!(n <= 55 && s.is_char_boundary(n));
    }

    #[test]
    fn a_classifier_is_a_cgroup_path_not_a_host_path() {
        // A hybrid host's: the FUSE switch compares /analytics (/proc/PID/cgroup's) for the
        // cgroup whose directory is /sys/fs/cgroup/unified/analytics.
        let hybrid = Cgroup2Mount {
            root: "/".into(),
            mount_point: "/sys/fs/cgroup/unified".into(),
        };
        for host_path in [
            "/sys/fs/cgroup/unified/analytics",
            "/sys/fs/cgroup/analytics",
        ] {
            let e = cgroup_dir_in(host_path, &hybrid).unwrap_err().to_string();
            assert!(
                e.contains("host path") && e.contains("\"/analytics\""),
                "{host_path}: {e}"
            );
        }
        let sub = Cgroup2Mount {
            root: "/docker/abc".into(),
            mount_point: "/sys/fs/cgroup".into(),
        };
        assert!(cgroup_dir_in("/other", &sub)
            .unwrap_err()
            .to_string()
            .contains("outside the cgroup2 mount"));
        // The root cgroup of this host's own mount, if it has one, is always there.
        if let Ok(m) = mount() {
            assert_eq!(cgroup_dir(&m.root).unwrap(), PathBuf::from(&m.mount_point));
        }
    }
}
