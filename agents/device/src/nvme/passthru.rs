//! NVMe passthrough on the generic character device `/dev/ngXnY`: commands go through
//! `IORING_OP_URING_CMD` on a ring with 128-byte SQEs and 32-byte CQEs, so writes can carry
//! the FDP data placement directive that the block layer does not pass down.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::buf::AlignedBuf;
use crate::device::{
    BlockDevice, Error, FdpLogs, FdpMode, Geometry, IoRequest, Placement, PlacementHandle, Result,
};

use super::cmd::{self, DsmRange, NvmeCommand, NVME_URING_CMD_IO};
use super::identify;
use super::logpage::{
    FdpConfigurations, FdpEvent, FdpStats, RuhStatus, RuhUsage, LID_FDP_CONFIGURATIONS,
    LID_FDP_EVENTS, LID_FDP_STATISTICS, LID_RUH_USAGE,
};

/// How to open an [`NvmePassthru`] device.
#[derive(Clone, Debug)]
pub struct NvmeConfig {
    /// Commands in flight on the ring.
    pub queue_depth: u32,
    /// What to do when the namespace has no FDP (see [`FdpMode`]).
    pub fdp: FdpMode,
    /// Cap on one command's transfer (bytes); the controller's MDTS applies too.
    pub max_io_bytes: u32,
}

impl Default for NvmeConfig {
    fn default() -> Self {
        NvmeConfig {
            queue_depth: 32,
            fdp: FdpMode::Required,
            max_io_bytes: 128 * 1024,
        }
    }
}

mod ioctl {
    // NVME_IOCTL_ID from <linux/nvme_ioctl.h>: returns the namespace id.
    nix::ioctl_none!(nvme_ioctl_id, b'N', 0x40);
    // NVME_IOCTL_ADMIN_CMD: `struct nvme_passthru_cmd`, 72 bytes, the layout of
    // `struct nvme_uring_cmd` with the completion's dword 0 written back at bytes 68-71.
    nix::ioctl_readwrite!(nvme_ioctl_admin_cmd, b'N', 0x41, [u8; 72]);
}

/// Runs an admin command; returns completion dword 0. Admin commands go through the ioctl:
/// the kernel takes `NVME_URING_CMD_ADMIN` only on the controller's character device
/// (`/dev/nvmeX`), and a namespace's generic device answers it with ENOTTY (seen on the
/// first real device, in the QEMU guest); the ioctl works on both. They are rare (open, log
/// pages), so the ring's batching buys nothing for them.
fn admin(fd: RawFd, cmd: &NvmeCommand, op: &'static str) -> Result<u32> {
    let mut raw = [0u8; 72];
    raw.copy_from_slice(&cmd.to_uring_cmd()[..72]);
    // SAFETY: `raw` is a valid nvme_passthru_cmd whose data pointer and length describe a
    // buffer the caller keeps alive across this synchronous call.
    let status = unsafe { ioctl::nvme_ioctl_admin_cmd(fd, &mut raw) }
        .map_err(|e| Error::io(op, io::Error::from(e)))?;
    if status > 0 {
        // A positive return is the NVMe status field (status code type + code).
        return Err(Error::NvmeStatus {
            op,
            status: status as u16,
        });
    }
    Ok(u32::from_le_bytes([raw[68], raw[69], raw[70], raw[71]]))
}

/// A ring of 128-byte SQEs / 32-byte CQEs for NVMe commands.
pub(crate) struct PassthruRing {
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    depth: usize,
}

impl PassthruRing {
    pub(crate) fn new(depth: u32) -> Result<PassthruRing> {
        // The entry types select IORING_SETUP_SQE128 | IORING_SETUP_CQE32.
        let ring = IoUring::<squeue::Entry128, cqueue::Entry32>::builder()
            .build(depth)
            .map_err(|e| Error::io("io_uring setup (SQE128/CQE32)", e))?;
        Ok(PassthruRing {
            ring,
            depth: depth as usize,
        })
    }

    /// Runs one command; returns completion dword 0.
    pub(crate) fn execute(
        &mut self,
        fd: RawFd,
        cmd_op: u32,
        cmd: &NvmeCommand,
        op: &'static str,
    ) -> Result<u32> {
        let mut dw0 = 0;
        self.execute_many(fd, cmd_op, std::slice::from_ref(cmd), op, |_, r| dw0 = r)?;
        Ok(dw0)
    }

    /// Runs `cmds` with up to the ring depth in flight; `on_done(index, dw0)` per success.
    /// Returns the first failure after every submitted command has completed.
    pub(crate) fn execute_many(
        &mut self,
        fd: RawFd,
        cmd_op: u32,
        cmds: &[NvmeCommand],
        op: &'static str,
        on_done: impl FnMut(usize, u32),
    ) -> Result<()> {
        self.execute_indexed(fd, cmd_op, cmds, op, on_done)
            .map_err(|(_, e)| e)
    }

    /// [`Self::execute_many`], with the index of the command that failed first.
    fn execute_indexed(
        &mut self,
        fd: RawFd,
        cmd_op: u32,
        cmds: &[NvmeCommand],
        op: &'static str,
        mut on_done: impl FnMut(usize, u32),
    ) -> std::result::Result<(), (usize, Error)> {
        let (mut next, mut in_flight) = (0usize, 0usize);
        let mut first_err: Option<(usize, Error)> = None;
        loop {
            while first_err.is_none() && next < cmds.len() && in_flight < self.depth {
                let sqe = opcode::UringCmd80::new(types::Fd(fd), cmd_op)
                    .cmd(cmds[next].to_uring_cmd())
                    .build()
                    .user_data(next as u64);
                // SAFETY: the command's data buffer is owned by the caller, who keeps it alive
                // until this function returns, and it returns only once nothing is in flight.
                if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                    break;
                }
                next += 1;
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    // Nothing can be reaped without io_uring_enter; keep trying, but stop
                    // submitting and report the first error.
                    first_err
                        .get_or_insert((next.saturating_sub(1), Error::io("io_uring wait", e)));
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
            }
            for cqe in self.ring.completion() {
                in_flight -= 1;
                let idx = cqe.user_data() as usize;
                let res = cqe.result();
                if res < 0 {
                    first_err
                        .get_or_insert((idx, Error::io(op, io::Error::from_raw_os_error(-res))));
                } else if res > 0 {
                    // A positive result is the NVMe status field (status code type + code).
                    first_err.get_or_insert((
                        idx,
                        Error::NvmeStatus {
                            op,
                            status: res as u16,
                        },
                    ));
                } else {
                    on_done(idx, cqe.big_cqe()[0] as u32);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// What opening decided about placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Writes carry DTYPE = 2 and the handle's placement identifier.
    Fdp,
    /// No directives; `handles` handles accepted and written to the default placement.
    Fallback { handles: u16 },
    /// No directives; only the default handle.
    Plain,
}

/// Decides placement from what the controller reports and what the caller asked for.
pub(crate) fn decide(
    device: &str,
    mode: FdpMode,
    supported: bool,
    enabled: bool,
    egid: u16,
) -> Result<Decision> {
    let reason = if !supported {
        "the controller does not support Flexible Data Placement (Identify Controller CTRATT bit 19 is 0)".to_string()
    } else if !enabled {
        format!("FDP is supported but not enabled on endurance group {egid} (Get Features 0x1d: FDPE = 0)")
    } else {
        String::new()
    };
    let available = reason.is_empty();
    match mode {
        FdpMode::Off => Ok(Decision::Plain),
        FdpMode::Required if available => Ok(Decision::Fdp),
        FdpMode::Required => Err(Error::FdpUnsupported {
            device: device.to_string(),
            reason,
        }),
        FdpMode::Fallback { .. } if available => Ok(Decision::Fdp),
        FdpMode::Fallback { handles } => {
            tracing::warn!(device, %reason, handles, "FDP unavailable: falling back to the default placement");
            Ok(Decision::Fallback {
                handles: handles.max(1),
            })
        }
    }
}

/// An NVMe namespace driven through its generic character device.
pub struct NvmePassthru {
    file: File,
    path: PathBuf,
    nsid: u32,
    ring: PassthruRing,
    geometry: Geometry,
    /// DSPEC value for each placement handle (empty without FDP).
    pids: Vec<u16>,
    endurance_group: u16,
    block_shift: u32,
    max_blocks: u32,
}

impl std::fmt::Debug for NvmePassthru {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmePassthru")
            .field("path", &self.path)
            .field("nsid", &self.nsid)
            .field("geometry", &self.geometry)
            .field("placement_ids", &self.pids)
            .finish()
    }
}

impl NvmePassthru {
    /// Opens `/dev/ngXnY`. Fails with [`Error::DeviceNotFound`] when the path does not exist,
    /// [`Error::NotNvmeGenericDevice`] when it is not an NVMe namespace's character device, and
    /// [`Error::FdpUnsupported`] when FDP is required and the namespace lacks it.
    pub fn open(path: impl AsRef<Path>, config: NvmeConfig) -> Result<NvmePassthru> {
        let path = path.as_ref();
        let not_generic = |reason: String| Error::NotNvmeGenericDevice {
            path: path.to_owned(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::DeviceNotFound {
                path: path.to_owned(),
            },
            _ => Error::io("stat device", e),
        })?;
        if !meta.file_type().is_char_device() {
            return Err(not_generic("not a character device".into()));
        }
        if config.queue_depth == 0 || config.queue_depth > 4096 {
            return Err(Error::Config(format!(
                "queue_depth {} must be 1..=4096",
                config.queue_depth
            )));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open device", e))?;
        // SAFETY: NVME_IOCTL_ID takes no argument.
        let nsid = unsafe { ioctl::nvme_ioctl_id(file.as_raw_fd()) }
            .map_err(|e| not_generic(format!("NVME_IOCTL_ID failed: {e}")))?
            as u32;
        let ring = PassthruRing::new(config.queue_depth)?;
        let fd = file.as_raw_fd();

        let mut id = AlignedBuf::new(cmd::IDENTIFY_LEN as usize)?;
        let c = cmd::identify(cmd::CNS_CONTROLLER, 0, id.as_mut_ptr() as u64);
        admin(fd, &c, "identify controller")?;
        let ctrl = identify::parse_controller(&id)?;
        let c = cmd::identify(cmd::CNS_NAMESPACE, nsid, id.as_mut_ptr() as u64);
        admin(fd, &c, "identify namespace")?;
        let ns = identify::parse_namespace(&id)?;

        let (enabled, config_index) = if ctrl.fdp_supported {
            let c = cmd::get_features(cmd::FEATURE_FDP, u32::from(ns.endurance_group));
            let dw0 = admin(fd, &c, "get features (FDP)")?;
            (dw0 & 1 != 0, ((dw0 >> 8) & 0xff) as usize)
        } else {
            (false, 0)
        };
        let device = path.display().to_string();
        let decision = decide(
            &device,
            config.fdp,
            ctrl.fdp_supported,
            enabled,
            ns.endurance_group,
        )?;

        // MDTS is in units of the controller's minimum page size; 4 KiB is the common value
        // and the conservative reading when CAP is not at hand.
        let mdts_bytes = if ctrl.mdts == 0 {
            u64::MAX
        } else {
            4096u64 << ctrl.mdts.min(20)
        };
        let max_io = u64::from(config.max_io_bytes)
            .min(mdts_bytes)
            .max(u64::from(ns.block_size));
        let max_blocks =
            ((max_io / u64::from(ns.block_size)) as u32).min(cmd::MAX_BLOCKS_PER_COMMAND);
        let mut dev = NvmePassthru {
            file,
            path: path.to_owned(),
            nsid,
            ring,
            geometry: Geometry {
                capacity_bytes: ns.blocks.saturating_mul(u64::from(ns.block_size)),
                block_size: ns.block_size,
                max_io_bytes: max_blocks * ns.block_size,
                placement_handles: 1,
                reclaim_unit_bytes: 0,
                reclaim_groups: 0,
                placement: Placement::None,
            },
            pids: Vec::new(),
            endurance_group: ns.endurance_group,
            block_shift: ns.block_size.trailing_zeros(),
            max_blocks,
        };
        match decision {
            Decision::Plain => {}
            Decision::Fallback { handles } => {
                dev.geometry.placement = Placement::Fallback;
                dev.geometry.placement_handles = handles;
            }
            Decision::Fdp => {
                let configs = dev.fdp_configurations()?;
                let active = configs
                    .configs
                    .get(config_index)
                    .ok_or_else(|| Error::Malformed {
                        what: "FDP configurations log page",
                        reason: format!(
                            "active configuration {config_index} not among {}",
                            configs.configs.len()
                        ),
                    })?;
                let status = dev.ruh_status()?;
                if status.is_empty() {
                    return Err(Error::FdpUnsupported {
                        device,
                        reason: "the namespace has no placement handles".into(),
                    });
                }
                dev.pids = status.iter().map(|s| s.placement_id).collect();
                dev.geometry.placement = Placement::Fdp;
                dev.geometry.placement_handles = dev.pids.len().min(usize::from(u16::MAX)) as u16;
                dev.geometry.reclaim_unit_bytes = active.reclaim_unit_bytes;
                dev.geometry.reclaim_groups = active.reclaim_groups.min(u32::from(u16::MAX)) as u16;
            }
        }
        Ok(dev)
    }

    /// Namespace identifier.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// The path the device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reclaim Unit Handle Usage (log page 0x21).
    pub fn ruh_usage(&mut self) -> Result<Vec<RuhUsage>> {
        let buf = self.get_log(LID_RUH_USAGE, 0, 8 + 8 * 256)?;
        RuhUsage::parse_list(&buf)
    }

    /// FDP Events (log page 0x23) of the host kind (LSP bit 0 set): a reclaim unit not fully
    /// written when its handle moved on, an invalid placement identifier. The trait's
    /// `fdp_events` reads the controller's; the guest tests compare both with nvme-cli.
    pub fn fdp_host_events(&mut self) -> Result<Vec<FdpEvent>> {
        let len = (FdpEvent::HEADER_LEN + FdpEvent::MAX_PER_LOG * FdpEvent::LEN) as u32;
        FdpEvent::parse_log(&self.get_log(LID_FDP_EVENTS, 1, len)?)
    }

    fn get_log(&mut self, lid: u8, lsp: u8, len: u32) -> Result<AlignedBuf> {
        let mut buf = AlignedBuf::new(len as usize)?;
        let c = cmd::get_log_page(
            lid,
            lsp,
            self.endurance_group,
            0,
            buf.as_mut_ptr() as u64,
            len,
        )?;
        admin(self.file.as_raw_fd(), &c, "get log page")?;
        Ok(buf)
    }

    fn io_commands(
        &self,
        offset: u64,
        ptr: *mut u8,
        len: usize,
        write: Option<Option<u16>>,
    ) -> Result<Vec<NvmeCommand>> {
        let bs = 1usize << self.block_shift;
        let per = self.max_blocks as usize * bs;
        let mut out = Vec::with_capacity(len.div_ceil(per));
        let mut done = 0;
        while done < len {
            let n = per.min(len - done);
            let slba = (offset + done as u64) >> self.block_shift;
            let nlb = (n / bs) as u32;
            // SAFETY: done < len, inside the caller's buffer.
            let addr = unsafe { ptr.add(done) } as u64;
            out.push(match write {
                None => cmd::read(self.nsid, slba, nlb, addr, n as u32)?,
                Some(pid) => cmd::write(self.nsid, slba, nlb, addr, n as u32, pid)?,
            });
            done += n;
        }
        Ok(out)
    }
}

impl BlockDevice for NvmePassthru {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        let cmds = self.io_commands(offset, buf.as_mut_ptr(), buf.len(), None)?;
        self.ring.execute_many(
            self.file.as_raw_fd(),
            NVME_URING_CMD_IO,
            &cmds,
            "read",
            |_, _| {},
        )
    }

    fn write(&mut self, offset: u64, buf: &[u8], handle: PlacementHandle) -> Result<()> {
        self.geometry.check_range(offset, buf.len() as u64)?;
        self.geometry.check_handle(handle)?;
        let pid = self.pids.get(usize::from(handle.0)).copied();
        // The kernel only reads from a write's buffer.
        let cmds = self.io_commands(offset, buf.as_ptr() as *mut u8, buf.len(), Some(pid))?;
        self.ring.execute_many(
            self.file.as_raw_fd(),
            NVME_URING_CMD_IO,
            &cmds,
            "write",
            |_, _| {},
        )
    }

    /// The whole batch on the ring at once (up to its depth in flight), as fio's
    /// io_uring_cmd engine keeps a queue full; the default would run one command at a time.
    fn submit_batch(&mut self, batch: &mut [IoRequest<'_>]) -> Result<()> {
        let mut cmds = Vec::with_capacity(batch.len());
        let mut owner = Vec::with_capacity(batch.len());
        for (index, req) in batch.iter_mut().enumerate() {
            let at = |e: Error| Error::Batch {
                index,
                source: Box::new(e),
            };
            let (offset, len) = (req.offset(), req.len());
            self.geometry.check_range(offset, len as u64).map_err(at)?;
            let made = match req {
                IoRequest::Read { buf, .. } => {
                    self.io_commands(offset, buf.as_mut_ptr(), len, None)
                }
                IoRequest::Write { buf, handle, .. } => {
                    self.geometry.check_handle(*handle).map_err(at)?;
                    let pid = self.pids.get(usize::from(handle.0)).copied();
                    // The kernel only reads from a write's buffer.
                    self.io_commands(offset, buf.as_ptr() as *mut u8, len, Some(pid))
                }
            }
            .map_err(at)?;
            owner.extend(std::iter::repeat_n(index, made.len()));
            cmds.extend(made);
        }
        self.ring
            .execute_indexed(
                self.file.as_raw_fd(),
                NVME_URING_CMD_IO,
                &cmds,
                "batch",
                |_, _| {},
            )
            .map_err(|(i, e)| Error::Batch {
                index: owner.get(i).copied().unwrap_or(0),
                source: Box::new(e),
            })
    }

    fn trim(&mut self, offset: u64, len: u64) -> Result<()> {
        self.geometry.check_range(offset, len)?;
        let mut slba = offset >> self.block_shift;
        let mut left = len >> self.block_shift;
        let mut ranges = Vec::new();
        while left > 0 {
            let n = left.min(u64::from(u32::MAX));
            ranges.push(DsmRange {
                slba,
                nlb: n as u32,
            });
            slba += n;
            left -= n;
        }
        for chunk in ranges.chunks(cmd::MAX_DSM_RANGES) {
            let bytes = DsmRange::encode(chunk);
            let mut buf = AlignedBuf::new(bytes.len())?;
            buf.copy_from_slice(&bytes);
            let c = cmd::dsm_deallocate(self.nsid, buf.as_mut_ptr() as u64, chunk.len())?;
            self.ring
                .execute(self.file.as_raw_fd(), NVME_URING_CMD_IO, &c, "deallocate")?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        // NVMe Flush (opcode 0x00) makes the volatile write cache durable.
        let c = NvmeCommand {
            opcode: 0x00,
            nsid: self.nsid,
            ..Default::default()
        };
        self.ring
            .execute(self.file.as_raw_fd(), NVME_URING_CMD_IO, &c, "flush")
            .map(|_| ())
    }
}

impl FdpLogs for NvmePassthru {
    fn fdp_stats(&mut self) -> Result<FdpStats> {
        FdpStats::parse(&self.get_log(LID_FDP_STATISTICS, 0, FdpStats::LEN as u32)?)
    }

    fn ruh_status(&mut self) -> Result<Vec<RuhStatus>> {
        let mut len = 4096u32;
        loop {
            let mut buf = AlignedBuf::new(len as usize)?;
            let c = cmd::ruh_status(self.nsid, buf.as_mut_ptr() as u64, len)?;
            self.ring.execute(
                self.file.as_raw_fd(),
                NVME_URING_CMD_IO,
                &c,
                "io management receive",
            )?;
            let n = usize::from(u16::from_le_bytes([buf[14], buf[15]]));
            let need = (RuhStatus::HEADER_LEN + n * RuhStatus::LEN) as u32;
            if need <= len {
                return RuhStatus::parse_list(&buf);
            }
            len = need.next_multiple_of(4096);
        }
    }

    fn fdp_events(&mut self) -> Result<Vec<FdpEvent>> {
        // LSP bit 0 selects host events (1) or controller events (0); media reallocated is a
        // controller event.
        let len = (FdpEvent::HEADER_LEN + FdpEvent::MAX_PER_LOG * FdpEvent::LEN) as u32;
        FdpEvent::parse_log(&self.get_log(LID_FDP_EVENTS, 0, len)?)
    }

    fn fdp_configurations(&mut self) -> Result<FdpConfigurations> {
        let head = self.get_log(LID_FDP_CONFIGURATIONS, 0, 16)?;
        let size = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if !(16..=1 << 20).contains(&size) {
            return Err(Error::Malformed {
                what: "FDP configurations log page",
                reason: format!("size {size}"),
            });
        }
        FdpConfigurations::parse(&self.get_log(
            LID_FDP_CONFIGURATIONS,
            0,
            size.next_multiple_of(4),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_decision_matrix() {
        let d = |mode, sup, en| decide("/dev/ng0n1", mode, sup, en, 1);
        assert_eq!(d(FdpMode::Required, true, true).unwrap(), Decision::Fdp);
        assert_eq!(
            d(FdpMode::Fallback { handles: 4 }, true, true).unwrap(),
            Decision::Fdp
        );
        assert_eq!(d(FdpMode::Off, true, true).unwrap(), Decision::Plain);
        assert_eq!(d(FdpMode::Off, false, false).unwrap(), Decision::Plain);
        assert_eq!(
            d(FdpMode::Fallback { handles: 4 }, false, false).unwrap(),
            Decision::Fallback { handles: 4 }
        );
        assert_eq!(
            d(FdpMode::Fallback { handles: 0 }, true, false).unwrap(),
            Decision::Fallback { handles: 1 }
        );
        let e = d(FdpMode::Required, false, false).unwrap_err().to_string();
        assert!(
            e.contains("does not support Flexible Data Placement"),
            "{e}"
        );
        let e = d(FdpMode::Required, true, false).unwrap_err().to_string();
        assert!(e.contains("not enabled on endurance group 1"), "{e}");
    }

    #[test]
    fn uring_cmd_on_a_regular_file_is_a_clear_error() {
        // Exercises the SQE128/CQE32 ring and the URING_CMD submission path without a drive:
        // the kernel rejects the command for a file that has no uring_cmd handler.
        let f = tempfile::tempfile().unwrap();
        let mut ring = PassthruRing::new(4).unwrap();
        let c = cmd::read(1, 0, 1, 0, 4096).unwrap();
        let err = ring
            .execute(f.as_raw_fd(), NVME_URING_CMD_IO, &c, "read")
            .unwrap_err();
        match err {
            Error::Io { op: "read", source } => {
                assert!(matches!(
                    source.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY) | Some(libc::EINVAL)
                ))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
