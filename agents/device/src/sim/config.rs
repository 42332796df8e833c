//! Shape of a simulated FDP SSD: flash geometry, overprovisioning and reclaim unit handles.

use std::path::PathBuf;

use crate::device::{Error, Result};
use crate::nvme::logpage::RuhType;

/// Configuration of a [`super::SimSsd`].
///
/// Flash is modelled as reclaim groups of reclaim units; a reclaim unit is a superblock of
/// `erase_blocks_per_ru` erase blocks (one per die and plane) that is written, reclaimed and
/// erased as a whole, like the superblock-sized RUs of the drive in the FDP paper.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Flash page size, also the logical block size the host sees (bytes, power of two).
    pub page_size: u32,
    /// Pages per erase block.
    pub pages_per_erase_block: u32,
    /// Erase blocks per reclaim unit (superblock width: dies × planes).
    pub erase_blocks_per_ru: u32,
    /// Reclaim units in each reclaim group.
    pub rus_per_group: u32,
    /// Number of reclaim groups. Placement handle `h` writes to group `h / handles.len()`.
    pub reclaim_groups: u16,
    /// Device overprovisioning: (physical − logical) / logical. 0.07 means the flash holds
    /// 7% more than the host can address.
    pub overprovisioning: f64,
    /// Reclaim unit handles of the FDP configuration, with their isolation type.
    pub handles: Vec<RuhType>,
    /// Free reclaim units each group keeps back; garbage collection runs when a group is down
    /// to this many (at least 1, so relocation always has somewhere to go).
    pub gc_reserve_rus: u32,
    /// How many FDP events to keep (oldest dropped first).
    pub max_events: usize,
    /// Keep data in this file (created or truncated to the physical size) so reads return
    /// what was written and relocation copies real bytes. `None` simulates metadata only.
    pub backing_file: Option<PathBuf>,
}

impl Default for SimConfig {
    /// 4 KiB pages, 4 MiB reclaim units (4 erase blocks of 256 pages), one reclaim group of
    /// 1024 units (4 GiB physical), 7% overprovisioning and 8 initially isolated handles, the
    /// handle count and type of the paper's drive.
    fn default() -> Self {
        SimConfig {
            page_size: 4096,
            pages_per_erase_block: 256,
            erase_blocks_per_ru: 4,
            rus_per_group: 1024,
            reclaim_groups: 1,
            overprovisioning: 0.07,
            handles: vec![RuhType::InitiallyIsolated; 8],
            gc_reserve_rus: 2,
            max_events: 4096,
            backing_file: None,
        }
    }
}

/// Sizes derived from a validated [`SimConfig`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub page_size: u32,
    pub pages_per_ru: u32,
    pub rus_per_group: u32,
    pub groups: u32,
    pub total_rus: u32,
    pub logical_pages: u32,
    pub ruhs: u32,
    /// Reclaim Group Identifier Format: upper PID bits naming the group.
    pub rgif: u32,
}

impl Layout {
    /// FDP placement identifier of handle `ruh` in `group`: the group sits in the upper
    /// `rgif` bits, as on a real device.
    pub fn placement_id(&self, group: u32, ruh: u32) -> u16 {
        if self.rgif == 0 {
            ruh as u16
        } else {
            ((group << (16 - self.rgif)) | ruh) as u16
        }
    }
}

impl SimConfig {
    /// Checks the configuration and derives its sizes.
    pub(crate) fn layout(&self) -> Result<Layout> {
        let bad = |m: String| Err(Error::Config(m));
        if !self.page_size.is_power_of_two() || self.page_size < 512 {
            return bad(format!(
                "page_size {} must be a power of two >= 512",
                self.page_size
            ));
        }
        if self.pages_per_erase_block == 0 || self.erase_blocks_per_ru == 0 {
            return bad("pages_per_erase_block and erase_blocks_per_ru must be > 0".into());
        }
        if self.rus_per_group == 0 || self.reclaim_groups == 0 || self.reclaim_groups > 256 {
            return bad("rus_per_group must be > 0 and reclaim_groups 1..=256".into());
        }
        if self.handles.is_empty() || self.handles.len() > 256 {
            return bad(format!(
                "{} reclaim unit handles; need 1..=256",
                self.handles.len()
            ));
        }
        if let Some(t) = self.handles.iter().find(|t| matches!(t, RuhType::Other(_))) {
            return bad(format!("unsupported reclaim unit handle type {t:?}"));
        }
        if !(self.overprovisioning.is_finite() && self.overprovisioning > 0.0) {
            return bad(format!(
                "overprovisioning {} must be > 0",
                self.overprovisioning
            ));
        }
        if self.gc_reserve_rus == 0 {
            return bad("gc_reserve_rus must be >= 1".into());
        }
        let pages_per_ru = self
            .pages_per_erase_block
            .checked_mul(self.erase_blocks_per_ru)
            .ok_or_else(|| Error::Config("reclaim unit too large".into()))?;
        let groups = u32::from(self.reclaim_groups);
        let total_rus = self
            .rus_per_group
            .checked_mul(groups)
            .ok_or_else(|| Error::Config("too many reclaim units".into()))?;
        // Page numbers are u32 with u32::MAX as the "unmapped" marker.
        let physical = u64::from(total_rus) * u64::from(pages_per_ru);
        if physical >= u64::from(u32::MAX) {
            return bad(format!(
                "{physical} physical pages; at most {} are supported",
                u32::MAX - 1
            ));
        }
        let logical_pages = (physical as f64 / (1.0 + self.overprovisioning)).floor() as u32;
        let ruhs = self.handles.len() as u32;
        let persistent = self
            .handles
            .iter()
            .filter(|t| **t == RuhType::PersistentlyIsolated)
            .count() as u32;
        // Every group may hold one open unit per handle for host writes and one per GC stream
        // (a shared one for initially isolated handles, one per persistently isolated handle),
        // plus its reserve. Spare space must exceed that, or garbage collection could find
        // every closed unit full of valid data.
        let open_per_group = ruhs + 1 + persistent + self.gc_reserve_rus;
        let spare_rus =
            u64::from(total_rus) - u64::from(logical_pages).div_ceil(u64::from(pages_per_ru));
        if spare_rus <= u64::from(open_per_group) * u64::from(groups) {
            return bad(format!(
                "overprovisioning {:.1}% leaves {spare_rus} spare reclaim units; {groups} group(s) with {ruhs} \
                 handles need more than {} (add reclaim units or overprovisioning)",
                self.overprovisioning * 100.0,
                u64::from(open_per_group) * u64::from(groups)
            ));
        }
        Ok(Layout {
            page_size: self.page_size,
            pages_per_ru,
            rus_per_group: self.rus_per_group,
            groups,
            total_rus,
            logical_pages,
            ruhs,
            rgif: if groups > 1 {
                32 - (groups - 1).leading_zeros()
            } else {
                0
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_sized() {
        let l = SimConfig::default().layout().unwrap();
        assert_eq!(l.pages_per_ru, 1024);
        assert_eq!(l.total_rus, 1024);
        let physical = 1024.0 * 1024.0;
        assert!((physical / f64::from(l.logical_pages) - 1.07).abs() < 1e-5);
    }

    #[test]
    fn rejects_bad_shapes() {
        let ok = SimConfig::default();
        let cases = [
            SimConfig {
                page_size: 1000,
                ..ok.clone()
            },
            SimConfig {
                overprovisioning: 0.0,
                ..ok.clone()
            },
            SimConfig {
                overprovisioning: f64::NAN,
                ..ok.clone()
            },
            SimConfig {
                handles: vec![],
                ..ok.clone()
            },
            SimConfig {
                gc_reserve_rus: 0,
                ..ok.clone()
            },
            SimConfig {
                rus_per_group: 16,
                overprovisioning: 0.05,
                ..ok.clone()
            },
            SimConfig {
                handles: vec![RuhType::Other(9)],
                ..ok.clone()
            },
        ];
        for c in cases {
            assert!(matches!(c.layout(), Err(Error::Config(_))), "{c:?}");
        }
    }
}
