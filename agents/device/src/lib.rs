//! Lachesis device layer: one [`BlockDevice`] trait with FDP placement handles, and four
//! backends behind it.
//!
//! - [`uring::UringDevice`]: io_uring on a file or block device with O_DIRECT, registered
//!   buffers, batched submission and one ring per worker thread.
//! - [`nvme::NvmePassthru`]: NVMe passthrough on `/dev/ngXnY` (`IORING_OP_URING_CMD`), writes
//!   with the FDP data placement directive, deallocate, RUH status and the FDP log pages.
//! - [`sim::SimSsd`]: a simulated FDP SSD with greedy garbage collection that measures
//!   device-level write amplification (DLWA) instead of assuming it.
//! - [`measured::MeasuredDevice`]: a device that measures: data in a file through
//!   [`uring::UringDevice`], and the simulator's FTL run beside it on every write and trim, so
//!   DLWA is measured under real IO (per placement handle).
//!
//! [`dlwa`] holds the FDP paper's analytic DLWA model the simulator is checked against, and DLWA measured from byte counters.

pub mod buf;
pub mod device;
pub mod dlwa;
pub mod measured;
pub mod nvme;
pub mod sim;
pub mod uring;

pub use buf::AlignedBuf;
pub use device::{
    BlockDevice, ConcurrentRead, Error, FdpLogs, FdpMode, Geometry, IoRequest, Placement,
    PlacementHandle, Result,
};
