//! NVMe command encoding for io_uring passthrough (`struct nvme_uring_cmd`, 72 bytes in the
//! 80-byte command area of a 128-byte SQE). Field positions follow the NVMe base and NVM
//! command set specifications; the fixtures in `tests/nvme_fixtures.rs` check them.

use crate::device::{Error, Result};

/// NVM command set opcodes.
pub mod opcode {
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Dataset Management (with the Deallocate attribute: trim).
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// I/O Management Receive (Reclaim Unit Handle Status).
    pub const IO_MANAGEMENT_RECEIVE: u8 = 0x12;
}

/// Admin command set opcodes.
pub mod admin_opcode {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0a;
}

/// Directive type of the Data Placement directive (FDP), carried in CDW12 bits 23:20.
pub const DTYPE_DATA_PLACEMENT: u32 = 2;
/// Feature identifier of Flexible Data Placement (Get Features).
pub const FEATURE_FDP: u8 = 0x1d;
/// I/O Management Receive operation: Reclaim Unit Handle Status.
pub const MO_RUH_STATUS: u8 = 0x01;
/// Dataset Management attribute: Deallocate (AD), CDW11 bit 2.
pub const DSM_ATTR_DEALLOCATE: u32 = 1 << 2;
/// Identify CNS values.
pub const CNS_NAMESPACE: u8 = 0x00;
/// Identify CNS: controller.
pub const CNS_CONTROLLER: u8 = 0x01;
/// Identify data structures are 4 KiB.
pub const IDENTIFY_LEN: u32 = 4096;

/// Size of `struct nvme_uring_cmd`.
pub const URING_CMD_LEN: usize = 72;

/// `cmd_op` for NVMe IO commands: `_IOWR('N', 0x80, struct nvme_uring_cmd)`.
pub const NVME_URING_CMD_IO: u32 = nix::request_code_readwrite!(b'N', 0x80, URING_CMD_LEN) as u32;
/// `cmd_op` for NVMe admin commands: `_IOWR('N', 0x82, struct nvme_uring_cmd)`. The kernel
/// takes it only on a controller's `/dev/nvmeX`; on a namespace's `/dev/ngXnY` (what
/// `NvmePassthru` opens) admin commands go through the `NVME_IOCTL_ADMIN_CMD` ioctl instead.
pub const NVME_URING_CMD_ADMIN: u32 =
    nix::request_code_readwrite!(b'N', 0x82, URING_CMD_LEN) as u32;

/// Most logical blocks one read or write can move (NLB is a zero-based 16-bit field).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;

/// One NVMe command as the kernel's passthrough interface takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeCommand {
    pub opcode: u8,
    pub flags: u8,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    /// User address of the data buffer.
    pub addr: u64,
    pub metadata_len: u32,
    /// Data buffer length in bytes.
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
}

impl NvmeCommand {
    /// Lays the command out as `struct nvme_uring_cmd` (little endian) in the 80-byte SQE
    /// command area; bytes 72-79 stay zero.
    pub fn to_uring_cmd(&self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0] = self.opcode;
        b[1] = self.flags;
        // bytes 2-3: rsvd1
        b[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        b[8..12].copy_from_slice(&self.cdw2.to_le_bytes());
        b[12..16].copy_from_slice(&self.cdw3.to_le_bytes());
        b[16..24].copy_from_slice(&self.metadata.to_le_bytes());
        b[24..32].copy_from_slice(&self.addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.metadata_len.to_le_bytes());
        b[36..40].copy_from_slice(&self.data_len.to_le_bytes());
        let cdws = [
            self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15,
        ];
        for (i, d) in cdws.iter().enumerate() {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&d.to_le_bytes());
        }
        b[64..68].copy_from_slice(&self.timeout_ms.to_le_bytes());
        // bytes 68-71: rsvd2
        b
    }
}

fn blocks_field(nlb: u32) -> Result<u32> {
    if nlb == 0 || nlb > MAX_BLOCKS_PER_COMMAND {
        return Err(Error::Config(format!(
            "{nlb} blocks per command; NVMe allows 1..={MAX_BLOCKS_PER_COMMAND}"
        )));
    }
    Ok(nlb - 1)
}

fn rw(op: u8, nsid: u32, slba: u64, nlb: u32, addr: u64, len: u32) -> Result<NvmeCommand> {
    Ok(NvmeCommand {
        opcode: op,
        nsid,
        addr,
        data_len: len,
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: blocks_field(nlb)?,
        ..Default::default()
    })
}

/// Read `nlb` blocks from `slba` into the buffer at `addr` (`len` bytes). Reads carry no
/// directive.
pub fn read(nsid: u32, slba: u64, nlb: u32, addr: u64, len: u32) -> Result<NvmeCommand> {
    rw(opcode::READ, nsid, slba, nlb, addr, len)
}

/// Write `nlb` blocks at `slba`. With `placement = Some(pid)` the write carries the data
/// placement directive: DTYPE = 2 in CDW12 bits 23:20 and DSPEC = pid in CDW13 bits 31:16.
pub fn write(
    nsid: u32,
    slba: u64,
    nlb: u32,
    addr: u64,
    len: u32,
    placement: Option<u16>,
) -> Result<NvmeCommand> {
    let mut c = rw(opcode::WRITE, nsid, slba, nlb, addr, len)?;
    if let Some(pid) = placement {
        c.cdw12 |= DTYPE_DATA_PLACEMENT << 20;
        c.cdw13 = u32::from(pid) << 16;
    }
    Ok(c)
}

/// One Dataset Management range (16 bytes on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsmRange {
    pub slba: u64,
    /// Length in logical blocks (one-based, unlike a read's NLB).
    pub nlb: u32,
}

impl DsmRange {
    /// Encodes ranges as the command's data buffer: context attributes (0), length, SLBA.
    pub fn encode(ranges: &[DsmRange]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * ranges.len());
        for r in ranges {
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&r.nlb.to_le_bytes());
            out.extend_from_slice(&r.slba.to_le_bytes());
        }
        out
    }
}

/// Most ranges one Dataset Management command carries (NR is zero-based, 8 bits).
pub const MAX_DSM_RANGES: usize = 256;

/// Deallocate the ranges encoded at `addr` ([`DsmRange::encode`], `ranges` of them).
pub fn dsm_deallocate(nsid: u32, addr: u64, ranges: usize) -> Result<NvmeCommand> {
    if ranges == 0 || ranges > MAX_DSM_RANGES {
        return Err(Error::Config(format!(
            "{ranges} ranges; Dataset Management takes 1..={MAX_DSM_RANGES}"
        )));
    }
    Ok(NvmeCommand {
        opcode: opcode::DATASET_MANAGEMENT,
        nsid,
        addr,
        data_len: (16 * ranges) as u32,
        cdw10: (ranges - 1) as u32,
        cdw11: DSM_ATTR_DEALLOCATE,
        ..Default::default()
    })
}

fn dwords_field(len: u32) -> Result<u32> {
    if len < 4 || !len.is_multiple_of(4) {
        return Err(Error::Config(format!(
            "transfer of {len} bytes; must be a non-zero multiple of 4"
        )));
    }
    Ok(len / 4 - 1)
}

/// I/O Management Receive, Reclaim Unit Handle Status, into `len` bytes at `addr`.
/// CDW10: management operation in bits 7:0; CDW11: NUMD (zero-based dwords).
pub fn ruh_status(nsid: u32, addr: u64, len: u32) -> Result<NvmeCommand> {
    Ok(NvmeCommand {
        opcode: opcode::IO_MANAGEMENT_RECEIVE,
        nsid,
        addr,
        data_len: len,
        cdw10: u32::from(MO_RUH_STATUS),
        cdw11: dwords_field(len)?,
        ..Default::default()
    })
}

/// Get Log Page (admin). CDW10: LID 7:0, LSP 14:8, NUMDL 31:16; CDW11: NUMDU 15:0, LSI
/// 31:16 (the endurance group for FDP logs); CDW12/13: byte offset; CDW14: CSI 31:24 (NVM = 0).
pub fn get_log_page(
    lid: u8,
    lsp: u8,
    lsi: u16,
    offset: u64,
    addr: u64,
    len: u32,
) -> Result<NvmeCommand> {
    if lsp > 0x7f {
        return Err(Error::Config(format!(
            "log specific parameter {lsp:#x} exceeds 7 bits"
        )));
    }
    if !offset.is_multiple_of(4) {
        return Err(Error::Config(format!(
            "log page offset {offset} is not dword aligned"
        )));
    }
    let numd = dwords_field(len)?;
    Ok(NvmeCommand {
        opcode: admin_opcode::GET_LOG_PAGE,
        nsid: 0,
        addr,
        data_len: len,
        cdw10: u32::from(lid) | (u32::from(lsp) << 8) | ((numd & 0xffff) << 16),
        cdw11: (numd >> 16) | (u32::from(lsi) << 16),
        cdw12: offset as u32,
        cdw13: (offset >> 32) as u32,
        ..Default::default()
    })
}

/// Identify (admin): CNS in CDW10 bits 7:0; 4 KiB of data at `addr`.
pub fn identify(cns: u8, nsid: u32, addr: u64) -> NvmeCommand {
    NvmeCommand {
        opcode: admin_opcode::IDENTIFY,
        nsid,
        addr,
        data_len: IDENTIFY_LEN,
        cdw10: u32::from(cns),
        ..Default::default()
    }
}

/// Get Features (admin), current value: FID in CDW10 bits 7:0, SEL 0; `cdw11` is feature
/// specific (the endurance group for FDP). The value comes back in completion dword 0.
pub fn get_features(fid: u8, cdw11: u32) -> NvmeCommand {
    NvmeCommand {
        opcode: admin_opcode::GET_FEATURES,
        cdw10: u32::from(fid),
        cdw11,
        ..Default::default()
    }
}
