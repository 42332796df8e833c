//! Page-aligned heap buffers: O_DIRECT and registered io_uring buffers need memory aligned to
//! the device's DMA alignment, which `Vec<u8>` does not promise.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::device::{Error, Result};

/// Alignment of every [`AlignedBuf`]: a page, which satisfies any block device's DMA rule.
pub const BUF_ALIGN: usize = 4096;

/// A zero-initialised, 4 KiB-aligned byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads, like &Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes (len > 0) aligned to [`BUF_ALIGN`].
    pub fn new(len: usize) -> Result<AlignedBuf> {
        let layout = Self::layout(len)?;
        // SAFETY: layout has a non-zero size (checked in layout()).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| Error::Config(format!("cannot allocate a {len}-byte buffer")))?;
        Ok(AlignedBuf { ptr, len })
    }

    fn layout(len: usize) -> Result<Layout> {
        if len == 0 {
            return Err(Error::Config("buffer length must be > 0".into()));
        }
        Layout::from_size_align(len, BUF_ALIGN)
            .map_err(|e| Error::Config(format!("buffer of {len} bytes: {e}")))
    }

    /// Raw pointer for handing to the kernel.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Ok(layout) = Self::layout(self.len) {
            // SAFETY: allocated in new() with exactly this layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

/// Whether `ptr` and `len` satisfy `align` (a power of two).
pub(crate) fn is_aligned(ptr: *const u8, len: usize, align: usize) -> bool {
    (ptr as usize).is_multiple_of(align) && len.is_multiple_of(align)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::new(3 * 4096).unwrap();
        assert_eq!(b.as_mut_ptr() as usize % BUF_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[5] = 7;
        assert_eq!(b[5], 7);
        assert!(AlignedBuf::new(0).is_err());
    }
}
