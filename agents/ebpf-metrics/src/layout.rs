//! `#[repr(C)]` mirrors of `ebpf/lachesis.h`. The sizes are checked at
//! compile time against the skeleton's BTF-generated types, so a change to
//! the header that is not made here fails the build.

pub(crate) const HIST_BUCKETS: usize = 32;
pub(crate) const NR_LAYERS: usize = 4;
pub(crate) const NR_OPS: usize = 2;
pub(crate) const SYSCALL_TABLE: usize = 512;
pub(crate) const NAME_LEN: usize = 56;
pub(crate) const SYS_READ: u8 = 1;
pub(crate) const SYS_WRITE: u8 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawOpStats {
    pub ops: u64,
    pub bytes: u64,
    pub lat_hist: [u64; HIST_BUCKETS],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawTenantStats {
    pub io: [[RawOpStats; NR_OPS]; NR_LAYERS],
    pub blocks: u64,
    pub sampled: u64,
    pub sample_drops: u64,
    pub _reserved: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawTenantCfg {
    pub threshold: u32,
    pub flags: u32,
    pub name: [u8; NAME_LEN],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawCgroupTenant {
    pub tenant: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawState {
    pub generation: u32,
    pub _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct RawSample {
    pub time_ns: u64,
    pub block: u64,
    pub dev: u32,
    pub io_bytes: u32,
    pub tenant: u32,
    pub hash: u32,
    pub op: u8,
    pub _pad: [u8; 7],
}

/// Plain-old-data.
///
/// # Safety
///
/// Implement only for `#[repr(C)]` types (or integers) for which every bit
/// pattern is a valid value and that have no padding the compiler could
/// leave uninitialised.
pub(crate) unsafe trait Pod: Copy + 'static {}
unsafe impl Pod for RawOpStats {}
unsafe impl Pod for RawTenantStats {}
unsafe impl Pod for RawTenantCfg {}
unsafe impl Pod for RawCgroupTenant {}
unsafe impl Pod for RawState {}
unsafe impl Pod for RawSample {}
unsafe impl Pod for u32 {}
unsafe impl Pod for u64 {}

pub(crate) fn as_bytes<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: T is Pod (no padding, no invalid bit patterns), the slice
    // covers exactly the value and lives as long as the borrow.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// Copy a value out of a byte buffer (maps and the ring buffer hand us
/// unaligned bytes). None when the buffer is too short.
pub(crate) fn from_bytes<T: Pod>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: length checked; T is Pod so any bytes are a valid T;
    // read_unaligned does not need alignment.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

pub(crate) fn zeroed<T: Pod>() -> T {
    // SAFETY: T is Pod, all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[cfg(not(lachesis_no_bpf))]
const _: () = {
    use crate::skel::types;
    use std::mem::size_of;
    assert!(size_of::<RawTenantStats>() == size_of::<types::lx_tenant_stats>());
    assert!(size_of::<RawOpStats>() == size_of::<types::lx_op_stats>());
    assert!(size_of::<RawTenantCfg>() == size_of::<types::lx_tenant_cfg>());
    assert!(size_of::<RawCgroupTenant>() == size_of::<types::lx_cgroup_tenant>());
    assert!(size_of::<RawState>() == size_of::<types::lx_state>());
};

// lx_sample is only ever a ring-buffer record, so it has no BTF in the
// object to check against; its size is fixed by the header's field list.
const _: () = assert!(std::mem::size_of::<RawSample>() == 40);
