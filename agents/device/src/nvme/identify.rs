//! The few Identify fields the passthrough backend needs to size a namespace and to tell
//! whether the controller supports FDP.

use crate::device::{Error, Result};

/// Identify Controller fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// CTRATT bit 19: Flexible Data Placement supported.
    pub fdp_supported: bool,
    /// MDTS (byte 77): maximum transfer is 2^mdts minimum pages; 0 means no limit.
    pub mdts: u8,
}

/// Identify Namespace fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// NSZE: namespace size in logical blocks.
    pub blocks: u64,
    /// Logical block size of the formatted LBA format, in bytes.
    pub block_size: u32,
    /// ENDGID: endurance group (the LSI of the FDP log pages).
    pub endurance_group: u16,
}

/// Bit of CTRATT that advertises FDP.
pub const CTRATT_FDPS: u32 = 1 << 19;

fn need(buf: &[u8], what: &'static str) -> Result<()> {
    if buf.len() < 4096 {
        return Err(Error::Malformed {
            what,
            reason: format!("{} bytes, expected 4096", buf.len()),
        });
    }
    Ok(())
}

/// Parses an Identify Controller data structure.
pub fn parse_controller(buf: &[u8]) -> Result<ControllerInfo> {
    need(buf, "identify controller data")?;
    let ctratt = u32::from_le_bytes([buf[96], buf[97], buf[98], buf[99]]);
    Ok(ControllerInfo {
        fdp_supported: ctratt & CTRATT_FDPS != 0,
        mdts: buf[77],
    })
}

/// Parses an Identify Namespace data structure (NVM command set).
pub fn parse_namespace(buf: &[u8]) -> Result<NamespaceInfo> {
    need(buf, "identify namespace data")?;
    let blocks = u64::from_le_bytes(buf[0..8].try_into().unwrap_or([0; 8]));
    // FLBAS: format index in bits 3:0, with bits 6:5 as the upper bits when > 16 formats.
    let flbas = buf[26];
    let index = usize::from(flbas & 0x0f) | (usize::from((flbas >> 5) & 0x03) << 4);
    let lbaf = 128 + 4 * index;
    let lbads = buf[lbaf + 2];
    if !(9..=16).contains(&lbads) {
        return Err(Error::Malformed {
            what: "identify namespace data",
            reason: format!("LBA format {index} has LBADS {lbads} (block size 2^{lbads})"),
        });
    }
    Ok(NamespaceInfo {
        blocks,
        block_size: 1 << lbads,
        endurance_group: u16::from_le_bytes([buf[102], buf[103]]),
    })
}
