//! The one trait every backend implements, the geometry it reports, and the errors it returns.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::nvme::logpage::{FdpConfigurations, FdpEvent, FdpStats, RuhStatus};

/// Index into the device's list of placement identifiers (an FDP reclaim-unit-handle and
/// reclaim-group pair). Handle 0 is the default placement every device accepts; engines ask
/// the placement broker which handle a stream gets, the device maps it to the directive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacementHandle(pub u16);

impl PlacementHandle {
    /// No placement preference: the device's default reclaim unit handle.
    pub const DEFAULT: PlacementHandle = PlacementHandle(0);
}

impl fmt::Display for PlacementHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "placement handle {}", self.0)
    }
}

/// What the caller asks of placement when opening a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FdpMode {
    /// Use the device without placement directives; only the default handle is accepted.
    #[default]
    Off,
    /// FDP must be supported and enabled, otherwise opening fails with [`Error::FdpUnsupported`].
    Required,
    /// Use FDP when the device has it. Otherwise warn, accept `handles` placement handles and
    /// write them all to the default placement; [`Geometry::placement`] says
    /// [`Placement::Fallback`] so the caller can tell.
    Fallback {
        /// How many placement handles the caller wants to be able to name.
        handles: u16,
    },
}

/// Whether writes tagged with a placement handle are really placed apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The device has no placement; only [`PlacementHandle::DEFAULT`] is accepted.
    None,
    /// Handles map to distinct FDP placement identifiers.
    Fdp,
    /// FDP was requested but the device lacks it: every handle below
    /// [`Geometry::placement_handles`] is accepted and written to the default placement.
    Fallback,
}

/// Sizes a caller needs to lay out data on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Usable (logical) capacity in bytes.
    pub capacity_bytes: u64,
    /// Logical block size: every offset and length must be a multiple of it.
    pub block_size: u32,
    /// Largest single transfer the backend accepts before splitting it (bytes).
    pub max_io_bytes: u32,
    /// Number of placement handles a write may name (handles `0..placement_handles`).
    pub placement_handles: u16,
    /// Nominal reclaim unit size in bytes (0 when the device has no reclaim units).
    pub reclaim_unit_bytes: u64,
    /// Number of reclaim groups (0 when the device has none).
    pub reclaim_groups: u16,
    /// Whether placement handles are honoured, absent, or falling back to the default.
    pub placement: Placement,
}

impl Geometry {
    /// Checks that `[offset, offset + len)` is a whole number of blocks inside the device.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        let bs = u64::from(self.block_size);
        if len == 0 {
            return Err(Error::EmptyIo { offset });
        }
        if !offset.is_multiple_of(bs) {
            return Err(Error::Unaligned {
                what: "offset",
                value: offset,
                block_size: self.block_size,
            });
        }
        if !len.is_multiple_of(bs) {
            return Err(Error::Unaligned {
                what: "length",
                value: len,
                block_size: self.block_size,
            });
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.capacity_bytes => Ok(()),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                capacity: self.capacity_bytes,
            }),
        }
    }

    /// Checks that `handle` is one this device accepts.
    pub fn check_handle(&self, handle: PlacementHandle) -> Result<()> {
        if handle.0 < self.placement_handles {
            Ok(())
        } else {
            Err(Error::UnknownPlacementHandle {
                handle: handle.0,
                available: self.placement_handles,
            })
        }
    }
}

/// One IO of a batch (see [`BlockDevice::submit_batch`]).
#[derive(Debug)]
pub enum IoRequest<'a> {
    /// Read `buf.len()` bytes at `offset`.
    Read { offset: u64, buf: &'a mut [u8] },
    /// Write `buf` at `offset` with a placement handle.
    Write {
        offset: u64,
        buf: &'a [u8],
        handle: PlacementHandle,
    },
}

impl IoRequest<'_> {
    /// Byte offset of the request.
    pub fn offset(&self) -> u64 {
        match self {
            IoRequest::Read { offset, .. } | IoRequest::Write { offset, .. } => *offset,
        }
    }

    /// Length of the request in bytes.
    pub fn len(&self) -> usize {
        match self {
            IoRequest::Read { buf, .. } => buf.len(),
            IoRequest::Write { buf, .. } => buf.len(),
        }
    }

    /// Whether the request moves no bytes (always rejected by devices).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Positional reads of a device from many threads at once (see
/// [`BlockDevice::concurrent_reads`]).
pub trait ConcurrentRead: Send + Sync {
    /// Reads `buf.len()` bytes at `offset`, as [`BlockDevice::read`] does.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
}

/// A block device with FDP-style placement: the interface the cache engines write through.
///
/// Methods take `&mut self` because a backend instance owns one submission queue (one io_uring
/// per worker thread); open one instance per thread instead of sharing one.
pub trait BlockDevice {
    /// Sizes and placement capabilities.
    fn geometry(&self) -> &Geometry;

    /// Reads `buf.len()` bytes at `offset`. Blocks never written or deallocated read as zeroes
    /// on the simulated device; on real devices they read as whatever the device returns.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Writes `buf` at `offset`, placing it with `handle`.
    fn write(&mut self, offset: u64, buf: &[u8], handle: PlacementHandle) -> Result<()>;

    /// Deallocates (trims) `[offset, offset + len)`: the device may forget the data.
    fn trim(&mut self, offset: u64, len: u64) -> Result<()>;

    /// Makes completed writes durable.
    fn flush(&mut self) -> Result<()>;

    /// Reads of this device that any number of threads can do at once, without the lock a
    /// shared device is behind (`None`: this backend cannot; every read goes through
    /// [`BlockDevice::read`]). They read what completed writes left, like `read`.
    fn concurrent_reads(&self) -> Option<std::sync::Arc<dyn ConcurrentRead>> {
        None
    }

    /// Runs a batch of reads and writes. Backends with a submission queue issue them together;
    /// the default runs them one after another. On error, every IO already issued has
    /// completed before this returns, and the error names the request.
    fn submit_batch(&mut self, batch: &mut [IoRequest<'_>]) -> Result<()> {
        for (index, req) in batch.iter_mut().enumerate() {
            let res = match req {
                IoRequest::Read { offset, buf } => self.read(*offset, buf),
                IoRequest::Write {
                    offset,
                    buf,
                    handle,
                } => self.write(*offset, buf, *handle),
            };
            res.map_err(|e| Error::Batch {
                index,
                source: Box::new(e),
            })?;
        }
        Ok(())
    }
}

/// FDP introspection: what a drive reports through its log pages and IO Management Receive.
/// The NVMe passthrough backend reads them from the drive; the simulator reports its own.
pub trait FdpLogs {
    /// FDP Statistics (log page 0x22): host and media bytes written, media bytes erased.
    fn fdp_stats(&mut self) -> Result<FdpStats>;
    /// Reclaim Unit Handle Status (IO Management Receive, operation 1).
    fn ruh_status(&mut self) -> Result<Vec<RuhStatus>>;
    /// FDP Events (log page 0x23); on a drive, the controller events (media reallocated).
    fn fdp_events(&mut self) -> Result<Vec<FdpEvent>>;
    /// FDP Configurations (log page 0x20).
    fn fdp_configurations(&mut self) -> Result<FdpConfigurations>;
}

/// Errors of every backend. Bad input is reported before anything is sent to the device.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} {value} is not a multiple of the {block_size}-byte block size")]
    Unaligned {
        what: &'static str,
        value: u64,
        block_size: u32,
    },

    #[error("IO at offset {offset} has zero length")]
    EmptyIo { offset: u64 },

    #[error("IO [{offset}, +{len}) is outside the device's {capacity} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity: u64,
    },

    #[error("unknown placement handle {handle}: this device has {available} (0..{available})")]
    UnknownPlacementHandle { handle: u16, available: u16 },

    #[error("{device}: FDP not available: {reason}")]
    FdpUnsupported { device: String, reason: String },

    #[error("{}: no such device", path.display())]
    DeviceNotFound { path: PathBuf },

    #[error("{}: not an NVMe generic character device (/dev/ngXnY): {reason}", path.display())]
    NotNvmeGenericDevice { path: PathBuf, reason: String },

    #[error("invalid configuration: {0}")]
    Config(String),

    #[error("{op} failed: {source}")]
    Io {
        op: &'static str,
        #[source]
        source: io::Error,
    },

    #[error("{op}: short transfer, {done} of {expected} bytes")]
    ShortTransfer {
        op: &'static str,
        done: u64,
        expected: u64,
    },

    #[error("{op}: NVMe status {status:#x} (status code type {}, status code {:#x})", (status >> 8) & 0x7, status & 0xff)]
    NvmeStatus { op: &'static str, status: u16 },

    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },

    #[error("reclaim group {group} has no reclaimable space (all its reclaim units hold only valid data)")]
    ReclaimGroupFull { group: u16 },

    #[error("request {index} of the batch failed: {source}")]
    Batch {
        index: usize,
        #[source]
        source: Box<Error>,
    },

    #[error("{in_flight} IOs are in flight on this queue; wait for them first")]
    Busy { in_flight: usize },

    #[error("this io_uring belongs to another thread; open a worker() ring per thread")]
    ForeignThread,

    #[error("registered buffer {index} is in use by an IO in flight")]
    BufferBusy { index: usize },
}

impl Error {
    /// Wraps an OS error with the operation that produced it.
    pub fn io(op: &'static str, source: io::Error) -> Error {
        Error::Io { op, source }
    }
}

/// Result of every device operation.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            capacity_bytes: 1 << 20,
            block_size: 4096,
            max_io_bytes: 1 << 17,
            placement_handles: 2,
            reclaim_unit_bytes: 0,
            reclaim_groups: 0,
            placement: Placement::None,
        }
    }

    #[test]
    fn range_checks_reject_bad_io() {
        let g = geo();
        assert!(g.check_range(0, 4096).is_ok());
        assert!(g.check_range((1 << 20) - 4096, 4096).is_ok());
        assert!(matches!(
            g.check_range(1, 4096),
            Err(Error::Unaligned { what: "offset", .. })
        ));
        assert!(matches!(
            g.check_range(0, 100),
            Err(Error::Unaligned { what: "length", .. })
        ));
        assert!(matches!(g.check_range(0, 0), Err(Error::EmptyIo { .. })));
        assert!(matches!(
            g.check_range(1 << 20, 4096),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            g.check_range(4096 * 255, 8192),
            Err(Error::OutOfRange { .. })
        ));
        let err = g.check_range(!4095, 8192).unwrap_err();
        assert!(matches!(err, Error::OutOfRange { .. }), "{err}");
    }

    #[test]
    fn handle_checks() {
        let g = geo();
        assert!(g.check_handle(PlacementHandle(1)).is_ok());
        let err = g.check_handle(PlacementHandle(2)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown placement handle 2: this device has 2 (0..2)"
        );
    }
}
