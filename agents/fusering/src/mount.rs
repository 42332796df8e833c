//! Opening `/dev/fuse` and mounting a connection on it with mount(2) (root only: this crate
//! does not go through fusermount3).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Opens `/dev/fuse` and mounts a connection on it at `mountpoint`.
pub(crate) fn mount(mountpoint: &Path, name: &str, default_permissions: bool) -> io::Result<File> {
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")?;
    let target = CString::new(mountpoint.as_os_str().as_bytes())?;
    let source = CString::new(name)?;
    let fstype = CString::new(format!("fuse.{name}"))?;
    let data = CString::new(format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other{}",
        dev.as_raw_fd(),
        if default_permissions {
            ",default_permissions"
        } else {
            ""
        }
    ))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(dev)
}

/// Unmounts `mountpoint`; lazily if it is busy.
pub(crate) fn unmount(mountpoint: &Path) -> io::Result<()> {
    let target = CString::new(mountpoint.as_os_str().as_bytes())?;
    // SAFETY: a NUL-terminated path that outlives the calls.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    Err(io::Error::last_os_error())
}
