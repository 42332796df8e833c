//! The largest single allocation a thread makes while it decodes: "no unbounded allocation"
//! means that no number read from the input decides how much is allocated, so the largest
//! block must stay within a bound of the input's length (or a decoder's own fixed cap).
//!
//! A test binary installs [`Tracking`] as its global allocator; [`largest_during`] then
//! measures a closure on the calling thread (tests run in parallel threads, so the figure is
//! per thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, remembering per thread the largest block asked for.
pub struct Tracking;

thread_local! {
    // Const-initialised without a destructor: touching it never allocates.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // After the thread's TLS is gone (at thread exit) there is nothing to measure.
    let _ = LARGEST.try_with(|l| {
        if size > l.get() {
            l.set(size)
        }
    });
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its result with the largest block allocated on this thread meanwhile
/// (0 unless [`Tracking`] is the global allocator).
pub fn largest_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LARGEST.with(|l| l.replace(0));
    let out = f();
    let largest = LARGEST.with(|l| l.replace(before.max(l.get())));
    (out, largest)
}

/// Whether [`Tracking`] is installed (a test that relies on the figure checks this first).
pub fn is_tracking() -> bool {
    largest_during(|| drop(std::hint::black_box(vec![0u8; 4099]))).1 >= 4099
}
