//! FDP data structures: the log pages 0x20-0x23 and the Reclaim Unit Handle Status returned by
//! IO Management Receive. Parsed from (and encoded to) their little-endian wire layout, so the
//! NVMe passthrough backend and the simulated SSD report the same types.

use crate::device::{Error, Result};

/// Log page identifier: FDP Configurations.
pub const LID_FDP_CONFIGURATIONS: u8 = 0x20;
/// Log page identifier: Reclaim Unit Handle Usage.
pub const LID_RUH_USAGE: u8 = 0x21;
/// Log page identifier: FDP Statistics.
pub const LID_FDP_STATISTICS: u8 = 0x22;
/// Log page identifier: FDP Events.
pub const LID_FDP_EVENTS: u8 = 0x23;

fn malformed(what: &'static str, reason: impl Into<String>) -> Error {
    Error::Malformed {
        what,
        reason: reason.into(),
    }
}

/// Bounds-checked little-endian field reads.
struct Le<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Le<'a> {
    fn bytes<const N: usize>(&self, off: usize) -> Result<[u8; N]> {
        self.buf
            .get(off..off + N)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| {
                malformed(
                    self.what,
                    format!("needs {} bytes, has {}", off + N, self.buf.len()),
                )
            })
    }
    fn u8(&self, off: usize) -> Result<u8> {
        Ok(self.bytes::<1>(off)?[0])
    }
    fn u16(&self, off: usize) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(off)?))
    }
    fn u32(&self, off: usize) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(off)?))
    }
    fn u64(&self, off: usize) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(off)?))
    }
    fn u128(&self, off: usize) -> Result<u128> {
        Ok(u128::from_le_bytes(self.bytes(off)?))
    }
}

// ------------------------------------------------------------------ statistics (0x22)

/// FDP Statistics log page (LID 0x22): 128-bit counters for the endurance group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdpStats {
    /// Host Bytes with Metadata Written (HBMW), bytes 0-15.
    pub host_bytes_written: u128,
    /// Media Bytes with Metadata Written (MBMW), bytes 16-31.
    pub media_bytes_written: u128,
    /// Media Bytes Erased (MBE), bytes 32-47.
    pub media_bytes_erased: u128,
}

impl FdpStats {
    /// Size of the log page in bytes.
    pub const LEN: usize = 64;

    /// Parses the log page.
    pub fn parse(buf: &[u8]) -> Result<FdpStats> {
        let r = Le {
            buf,
            what: "FDP statistics log page",
        };
        Ok(FdpStats {
            host_bytes_written: r.u128(0)?,
            media_bytes_written: r.u128(16)?,
            media_bytes_erased: r.u128(32)?,
        })
    }

    /// Encodes the log page.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..16].copy_from_slice(&self.host_bytes_written.to_le_bytes());
        out[16..32].copy_from_slice(&self.media_bytes_written.to_le_bytes());
        out[32..48].copy_from_slice(&self.media_bytes_erased.to_le_bytes());
        out
    }

    /// Device-level write amplification since `earlier`: Δmedia bytes / Δhost bytes.
    /// `None` when no host bytes were written in between.
    pub fn dlwa_since(&self, earlier: &FdpStats) -> Option<f64> {
        crate::dlwa::dlwa_between(
            (earlier.host_bytes_written, earlier.media_bytes_written),
            (self.host_bytes_written, self.media_bytes_written),
        )
    }
}

// ------------------------------------------------------------------ RUH status (IO Mgmt Receive)

/// One Reclaim Unit Handle Status Descriptor (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuhStatus {
    /// Placement Identifier (PID), bytes 0-1: what a write puts in DSPEC.
    pub placement_id: u16,
    /// Reclaim Unit Handle Identifier (RUHID), bytes 2-3.
    pub ruh_id: u16,
    /// Estimated Active Reclaim Unit Time Remaining in seconds (EARUTR), bytes 4-7.
    pub time_remaining_s: u32,
    /// Reclaim Unit Available Media Writes in logical blocks (RUAMW), bytes 8-15.
    pub available_media_writes: u64,
}

impl RuhStatus {
    /// Descriptor size.
    pub const LEN: usize = 32;
    /// Header before the first descriptor (reserved bytes 0-13, NRUHSD at 14-15).
    pub const HEADER_LEN: usize = 16;

    /// Parses the Reclaim Unit Handle Status data structure.
    pub fn parse_list(buf: &[u8]) -> Result<Vec<RuhStatus>> {
        let r = Le {
            buf,
            what: "reclaim unit handle status",
        };
        let n = usize::from(r.u16(14)?);
        r.bytes::<0>(Self::HEADER_LEN + n * Self::LEN)?;
        (0..n)
            .map(|i| {
                let o = Self::HEADER_LEN + i * Self::LEN;
                Ok(RuhStatus {
                    placement_id: r.u16(o)?,
                    ruh_id: r.u16(o + 2)?,
                    time_remaining_s: r.u32(o + 4)?,
                    available_media_writes: r.u64(o + 8)?,
                })
            })
            .collect()
    }

    /// Encodes the Reclaim Unit Handle Status data structure.
    pub fn encode_list(list: &[RuhStatus]) -> Result<Vec<u8>> {
        let n = u16::try_from(list.len())
            .map_err(|_| Error::Config("too many RUH status descriptors".into()))?;
        let mut out = vec![0u8; Self::HEADER_LEN + list.len() * Self::LEN];
        out[14..16].copy_from_slice(&n.to_le_bytes());
        for (i, d) in list.iter().enumerate() {
            let o = Self::HEADER_LEN + i * Self::LEN;
            out[o..o + 2].copy_from_slice(&d.placement_id.to_le_bytes());
            out[o + 2..o + 4].copy_from_slice(&d.ruh_id.to_le_bytes());
            out[o + 4..o + 8].copy_from_slice(&d.time_remaining_s.to_le_bytes());
            out[o + 8..o + 16].copy_from_slice(&d.available_media_writes.to_le_bytes());
        }
        Ok(out)
    }
}

// ------------------------------------------------------------------ configurations (0x20)

/// Reclaim unit handle type (RUHT) from a configuration's RUH descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuhType {
    /// Data written through different handles may be mixed by garbage collection.
    InitiallyIsolated,
    /// Garbage collection keeps the handle's data in its own reclaim units.
    PersistentlyIsolated,
    /// A value this code does not know.
    Other(u8),
}

impl RuhType {
    fn from_wire(v: u8) -> RuhType {
        match v {
            1 => RuhType::InitiallyIsolated,
            2 => RuhType::PersistentlyIsolated,
            x => RuhType::Other(x),
        }
    }
    fn to_wire(self) -> u8 {
        match self {
            RuhType::InitiallyIsolated => 1,
            RuhType::PersistentlyIsolated => 2,
            RuhType::Other(x) => x,
        }
    }
}

/// One FDP Configuration Descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdpConfig {
    /// Reclaim Group Identifier Format: how many upper PID bits name the reclaim group.
    pub rgif: u8,
    /// FDP volatile write cache present.
    pub volatile_write_cache: bool,
    /// The descriptor is valid.
    pub valid: bool,
    /// Number of Reclaim Groups (NRG).
    pub reclaim_groups: u32,
    /// Maximum number of placement identifiers (MAXPIDS is zero-based on the wire).
    pub max_placement_ids: u32,
    /// Number of Namespaces Supported (NNSS).
    pub namespaces: u32,
    /// Reclaim Unit Nominal Size in bytes (RUNS).
    pub reclaim_unit_bytes: u64,
    /// Estimated Reclaim Unit Time Limit in seconds (ERUTL; 0 = not reported).
    pub ru_time_limit_s: u32,
    /// One entry per reclaim unit handle (NRUH of them).
    pub ruh_types: Vec<RuhType>,
}

impl FdpConfig {
    const HEADER_LEN: usize = 64;

    /// Builds the placement identifier for placement handle `ph` in reclaim group `rg`:
    /// the group sits in the upper RGIF bits of the 16-bit PID.
    pub fn placement_id(&self, rg: u16, ph: u16) -> Result<u16> {
        let rgif = u32::from(self.rgif);
        if rgif > 16 {
            return Err(malformed("FDP configuration", format!("RGIF {rgif} > 16")));
        }
        let ph_bits = 16 - rgif;
        let ph_fits = ph_bits >= 16 || u32::from(ph) < (1 << ph_bits);
        let rg_fits = if rgif == 0 {
            rg == 0
        } else {
            u32::from(rg) < (1 << rgif)
        };
        if !ph_fits || !rg_fits {
            return Err(Error::Config(format!(
                "placement handle {ph} / reclaim group {rg} do not fit RGIF {rgif}"
            )));
        }
        let rg_part = if rgif == 0 {
            0
        } else {
            u32::from(rg) << ph_bits
        };
        Ok((rg_part | u32::from(ph)) as u16)
    }
}

/// FDP Configurations log page (LID 0x20).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdpConfigurations {
    /// Log page version.
    pub version: u8,
    /// The configurations, indexed by FDP configuration index (FDPCIDX).
    pub configs: Vec<FdpConfig>,
}

impl FdpConfigurations {
    const HEADER_LEN: usize = 16;

    /// Parses the log page: a 16-byte header (NUMFDPC zero-based, version, size) followed by
    /// self-sized descriptors (DSZE), each with NRUH four-byte RUH descriptors at byte 64.
    pub fn parse(buf: &[u8]) -> Result<FdpConfigurations> {
        let r = Le {
            buf,
            what: "FDP configurations log page",
        };
        let count = usize::from(r.u16(0)?) + 1;
        let version = r.u8(2)?;
        let size = r.u32(4)? as usize;
        let buf = buf.get(..size.min(buf.len())).unwrap_or(buf);
        let mut configs = Vec::with_capacity(count);
        let mut off = Self::HEADER_LEN;
        for i in 0..count {
            let d = Le {
                buf,
                what: "FDP configuration descriptor",
            };
            let dsze = usize::from(d.u16(off)?);
            if dsze < FdpConfig::HEADER_LEN || off + dsze > buf.len() {
                return Err(malformed(
                    "FDP configuration descriptor",
                    format!("descriptor {i} has size {dsze}"),
                ));
            }
            let fdpa = d.u8(off + 2)?;
            let nruh = usize::from(d.u16(off + 8)?);
            if FdpConfig::HEADER_LEN + 4 * nruh > dsze {
                return Err(malformed(
                    "FDP configuration descriptor",
                    format!("{nruh} handles overflow {dsze} bytes"),
                ));
            }
            let ruh_types = (0..nruh)
                .map(|h| {
                    d.u8(off + FdpConfig::HEADER_LEN + 4 * h)
                        .map(RuhType::from_wire)
                })
                .collect::<Result<Vec<_>>>()?;
            configs.push(FdpConfig {
                rgif: fdpa & 0x0f,
                volatile_write_cache: fdpa & 0x10 != 0,
                valid: fdpa & 0x80 != 0,
                reclaim_groups: d.u32(off + 4)?,
                max_placement_ids: u32::from(d.u16(off + 10)?) + 1,
                namespaces: d.u32(off + 12)?,
                reclaim_unit_bytes: d.u64(off + 16)?,
                ru_time_limit_s: d.u32(off + 24)?,
                ruh_types,
            });
            off += dsze;
        }
        Ok(FdpConfigurations { version, configs })
    }

    /// Encodes the log page.
    pub fn encode(&self) -> Result<Vec<u8>> {
        if self.configs.is_empty() || self.configs.len() > usize::from(u16::MAX) + 1 {
            return Err(Error::Config(
                "an FDP configurations log needs 1..=65536 descriptors".into(),
            ));
        }
        let mut out = vec![0u8; Self::HEADER_LEN];
        out[0..2].copy_from_slice(&((self.configs.len() - 1) as u16).to_le_bytes());
        out[2] = self.version;
        for c in &self.configs {
            let dsze = FdpConfig::HEADER_LEN + 4 * c.ruh_types.len();
            let dsze16 = u16::try_from(dsze)
                .map_err(|_| Error::Config("too many RUHs in one configuration".into()))?;
            let nruh = u16::try_from(c.ruh_types.len())
                .map_err(|_| Error::Config("too many RUHs".into()))?;
            let maxpids = c
                .max_placement_ids
                .checked_sub(1)
                .and_then(|m| u16::try_from(m).ok())
                .ok_or_else(|| Error::Config("max_placement_ids must be 1..=65536".into()))?;
            let mut d = vec![0u8; dsze];
            d[0..2].copy_from_slice(&dsze16.to_le_bytes());
            d[2] = (c.rgif & 0x0f)
                | if c.volatile_write_cache { 0x10 } else { 0 }
                | if c.valid { 0x80 } else { 0 };
            d[4..8].copy_from_slice(&c.reclaim_groups.to_le_bytes());
            d[8..10].copy_from_slice(&nruh.to_le_bytes());
            d[10..12].copy_from_slice(&maxpids.to_le_bytes());
            d[12..16].copy_from_slice(&c.namespaces.to_le_bytes());
            d[16..24].copy_from_slice(&c.reclaim_unit_bytes.to_le_bytes());
            d[24..28].copy_from_slice(&c.ru_time_limit_s.to_le_bytes());
            for (h, t) in c.ruh_types.iter().enumerate() {
                d[FdpConfig::HEADER_LEN + 4 * h] = t.to_wire();
            }
            out.extend_from_slice(&d);
        }
        let size = u32::try_from(out.len()).map_err(|_| Error::Config("log too large".into()))?;
        out[4..8].copy_from_slice(&size.to_le_bytes());
        Ok(out)
    }
}

// ------------------------------------------------------------------ RUH usage (0x21)

/// Reclaim Unit Handle Usage descriptor: who uses each handle (RUHA bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RuhUsage {
    /// Bit 0: a namespace's placement handle refers to this RUH (host specified).
    pub host_specified: bool,
    /// Bit 1: the controller uses this RUH (controller specified).
    pub controller_specified: bool,
}

impl RuhUsage {
    /// Parses the log page: NRUH at bytes 0-1, eight-byte descriptors from byte 8.
    pub fn parse_list(buf: &[u8]) -> Result<Vec<RuhUsage>> {
        let r = Le {
            buf,
            what: "RUH usage log page",
        };
        let n = usize::from(r.u16(0)?);
        r.bytes::<0>(8 + 8 * n)?;
        (0..n)
            .map(|i| {
                let a = r.u8(8 + 8 * i)?;
                Ok(RuhUsage {
                    host_specified: a & 1 != 0,
                    controller_specified: a & 2 != 0,
                })
            })
            .collect()
    }

    /// Encodes the log page.
    pub fn encode_list(list: &[RuhUsage]) -> Result<Vec<u8>> {
        let n = u16::try_from(list.len()).map_err(|_| Error::Config("too many RUHs".into()))?;
        let mut out = vec![0u8; 8 + 8 * list.len()];
        out[0..2].copy_from_slice(&n.to_le_bytes());
        for (i, u) in list.iter().enumerate() {
            out[8 + 8 * i] = u8::from(u.host_specified) | (u8::from(u.controller_specified) << 1);
        }
        Ok(out)
    }
}

// ------------------------------------------------------------------ events (0x23)

/// FDP event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdpEventType {
    /// 0x00 (host event): a reclaim unit was not fully written before its handle moved on.
    RuNotFullyWritten,
    /// 0x01 (host event).
    RuTimeLimitExceeded,
    /// 0x02 (host event).
    ControllerResetModifiedRuh,
    /// 0x03 (host event): a write named a placement identifier the namespace does not have.
    InvalidPlacementId,
    /// 0x80 (controller event): garbage collection moved valid data.
    MediaReallocated,
    /// 0x81 (controller event).
    ImplicitlyModifiedRuh,
    /// A type this code does not know.
    Other(u8),
}

impl FdpEventType {
    fn from_wire(v: u8) -> FdpEventType {
        match v {
            0x00 => FdpEventType::RuNotFullyWritten,
            0x01 => FdpEventType::RuTimeLimitExceeded,
            0x02 => FdpEventType::ControllerResetModifiedRuh,
            0x03 => FdpEventType::InvalidPlacementId,
            0x80 => FdpEventType::MediaReallocated,
            0x81 => FdpEventType::ImplicitlyModifiedRuh,
            x => FdpEventType::Other(x),
        }
    }
    fn to_wire(self) -> u8 {
        match self {
            FdpEventType::RuNotFullyWritten => 0x00,
            FdpEventType::RuTimeLimitExceeded => 0x01,
            FdpEventType::ControllerResetModifiedRuh => 0x02,
            FdpEventType::InvalidPlacementId => 0x03,
            FdpEventType::MediaReallocated => 0x80,
            FdpEventType::ImplicitlyModifiedRuh => 0x81,
            FdpEventType::Other(x) => x,
        }
    }
}

/// Type-specific part of a Media Reallocated event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaReallocated {
    /// Number of LBAs moved (NLBAM).
    pub lbas_moved: u16,
    /// An LBA among those moved, when the device reports one (LBAV flag).
    pub lba: Option<u64>,
}

/// One 64-byte FDP event record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdpEvent {
    pub kind: FdpEventType,
    /// Placement identifier, when valid (PIV flag).
    pub placement_id: Option<u16>,
    /// Milliseconds since the Unix epoch (48-bit NVMe timestamp).
    pub timestamp_ms: u64,
    /// Namespace, when valid (NSIDV flag).
    pub nsid: Option<u32>,
    /// Reclaim group and reclaim unit handle, when valid (LV flag).
    pub location: Option<(u16, u8)>,
    /// Present for [`FdpEventType::MediaReallocated`].
    pub reallocated: Option<MediaReallocated>,
}

impl FdpEvent {
    /// Record size.
    pub const LEN: usize = 64;
    /// Header before the first record (NEL at bytes 0-3).
    pub const HEADER_LEN: usize = 64;
    /// How many records one log page carries.
    pub const MAX_PER_LOG: usize = 63;

    /// Parses the FDP Events log page.
    pub fn parse_log(buf: &[u8]) -> Result<Vec<FdpEvent>> {
        let r = Le {
            buf,
            what: "FDP events log page",
        };
        let n = r.u32(0)? as usize;
        if n > Self::MAX_PER_LOG {
            return Err(malformed(
                "FDP events log page",
                format!("{n} events > {}", Self::MAX_PER_LOG),
            ));
        }
        r.bytes::<0>(Self::HEADER_LEN + n * Self::LEN)?;
        (0..n)
            .map(|i| Self::parse(&r, Self::HEADER_LEN + i * Self::LEN))
            .collect()
    }

    fn parse(r: &Le<'_>, o: usize) -> Result<FdpEvent> {
        let kind = FdpEventType::from_wire(r.u8(o)?);
        let flags = r.u8(o + 1)?;
        let ts = r.bytes::<6>(o + 4)?;
        let mut ts8 = [0u8; 8];
        ts8[..6].copy_from_slice(&ts);
        let reallocated = if kind == FdpEventType::MediaReallocated {
            let sef = r.u8(o + 16)?;
            Some(MediaReallocated {
                lbas_moved: r.u16(o + 18)?,
                lba: if sef & 1 != 0 {
                    Some(r.u64(o + 20)?)
                } else {
                    None
                },
            })
        } else {
            None
        };
        Ok(FdpEvent {
            kind,
            placement_id: if flags & 1 != 0 {
                Some(r.u16(o + 2)?)
            } else {
                None
            },
            timestamp_ms: u64::from_le_bytes(ts8),
            nsid: if flags & 2 != 0 {
                Some(r.u32(o + 12)?)
            } else {
                None
            },
            location: if flags & 4 != 0 {
                Some((r.u16(o + 32)?, r.u8(o + 34)?))
            } else {
                None
            },
            reallocated,
        })
    }

    /// Encodes up to [`Self::MAX_PER_LOG`] events (the most recent ones) as a log page.
    pub fn encode_log(events: &[FdpEvent]) -> Vec<u8> {
        let events = &events[events.len().saturating_sub(Self::MAX_PER_LOG)..];
        let mut out = vec![0u8; Self::HEADER_LEN + Self::MAX_PER_LOG * Self::LEN];
        out[0..4].copy_from_slice(&(events.len() as u32).to_le_bytes());
        for (i, e) in events.iter().enumerate() {
            let o = Self::HEADER_LEN + i * Self::LEN;
            let rec = &mut out[o..o + Self::LEN];
            rec[0] = e.kind.to_wire();
            let mut flags = 0u8;
            if let Some(pid) = e.placement_id {
                flags |= 1;
                rec[2..4].copy_from_slice(&pid.to_le_bytes());
            }
            rec[4..10].copy_from_slice(&e.timestamp_ms.to_le_bytes()[..6]);
            if let Some(nsid) = e.nsid {
                flags |= 2;
                rec[12..16].copy_from_slice(&nsid.to_le_bytes());
            }
            if let Some(m) = e.reallocated {
                rec[18..20].copy_from_slice(&m.lbas_moved.to_le_bytes());
                if let Some(lba) = m.lba {
                    rec[16] = 1;
                    rec[20..28].copy_from_slice(&lba.to_le_bytes());
                }
            }
            if let Some((rg, ruh)) = e.location {
                flags |= 4;
                rec[32..34].copy_from_slice(&rg.to_le_bytes());
                rec[34] = ruh;
            }
            rec[1] = flags;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_errors_not_panics() {
        assert!(FdpStats::parse(&[0u8; 47]).is_err());
        assert!(RuhStatus::parse_list(&[0u8; 15]).is_err());
        let mut one = [0u8; 16 + 31];
        one[14] = 1;
        assert!(RuhStatus::parse_list(&one).is_err());
        assert!(FdpConfigurations::parse(&[0u8; 8]).is_err());
        let mut ev = vec![0u8; 64];
        ev[0] = 64;
        assert!(FdpEvent::parse_log(&ev).is_err());
    }

    #[test]
    fn placement_id_packs_reclaim_group_in_upper_bits() {
        let mut c = FdpConfig {
            rgif: 0,
            volatile_write_cache: false,
            valid: true,
            reclaim_groups: 1,
            max_placement_ids: 8,
            namespaces: 1,
            reclaim_unit_bytes: 1 << 30,
            ru_time_limit_s: 0,
            ruh_types: vec![RuhType::InitiallyIsolated; 8],
        };
        assert_eq!(c.placement_id(0, 5).unwrap(), 5);
        assert!(c.placement_id(1, 5).is_err());
        c.rgif = 2;
        assert_eq!(c.placement_id(3, 5).unwrap(), 0xC005);
        assert!(c.placement_id(4, 0).is_err());
    }
}
