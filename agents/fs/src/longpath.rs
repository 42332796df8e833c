//! Backing paths longer than one system call takes.
//!
//! The kernel hands the FUSE front end a parent and a name, and the front end reaches the
//! backing file by its path under the backing directory. That path is longer than the path the
//! application used by the backing directory's own length, so a path near `PATH_MAX` inside
//! the mount is over it on the backing file system (`ENAMETOOLONG` where the application's path
//! was valid). A [`Real`] path over [`LIMIT`] opens its ancestors a piece at a time (`O_PATH`
//! directories, each piece under the limit) and names the rest through the last one's
//! `/proc/thread-self/fd` entry (the calling thread's own fd table: FUSE worker threads may not share the leader's), so every `std::fs` call works on it unchanged.

use std::ffi::CString;
use std::io;
use std::ops::Deref;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Paths up to this many bytes are used as they are (PATH_MAX is 4096 with its NUL; the
/// `/proc/self/fd/N/` prefix needs room too).
pub const LIMIT: usize = 4000;

/// A backing path usable in one system call, with the directory it is relative to kept open.
pub struct Real {
    path: PathBuf,
    _dir: Option<OwnedFd>,
}

impl Real {
    pub fn new(abs: PathBuf) -> Real {
        if abs.as_os_str().len() <= LIMIT {
            return Real {
                path: abs,
                _dir: None,
            };
        }
        // A parent that cannot be opened: the call fails on the full path as it would have.
        walk(&abs).unwrap_or(Real {
            path: abs,
            _dir: None,
        })
    }
}

fn open_dir(at: Option<&OwnedFd>, piece: &[u8]) -> io::Result<OwnedFd> {
    let c = CString::new(piece).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let base: RawFd = at.map_or(libc::AT_FDCWD, std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: a valid C string and directory fd; the fd returned is ours to own.
    let fd = unsafe {
        libc::openat(
            base,
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn walk(abs: &Path) -> io::Result<Real> {
    let bytes = abs.as_os_str().as_bytes();
    let mut dir: Option<OwnedFd> = None;
    let mut start = 0;
    // Cut at a '/' so that each piece (and the rest, after the prefix) stays under the limit.
    while bytes.len() - start > LIMIT - 64 {
        let window = &bytes[start..start + LIMIT - 64];
        let cut = window
            .iter()
            .rposition(|b| *b == b'/')
            .filter(|c| *c > 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
        dir = Some(open_dir(dir.as_ref(), &window[..cut])?);
        start += cut + 1;
    }
    let rest = std::ffi::OsStr::from_bytes(&bytes[start..]);
    let path = match &dir {
        Some(d) => Path::new(&format!(
            "/proc/thread-self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(d)
        ))
        .join(rest),
        None => PathBuf::from(rest),
    };
    Ok(Real { path, _dir: dir })
}

impl Deref for Real {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Real {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_over_the_limit_is_reached_through_an_open_ancestor() {
        let t = tempfile::tempdir().unwrap();
        let mut p = t.path().to_path_buf();
        // 40 directories of 200 bytes: about 8,000 bytes, twice what one call takes.
        for i in 0..40 {
            p.push(format!("{i:0200}"));
            let r = Real::new(p.clone());
            std::fs::create_dir(&r).unwrap();
        }
        assert!(p.as_os_str().len() > 2 * LIMIT);
        let f = Real::new(p.join("file"));
        assert!(f.as_os_str().len() <= LIMIT);
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(std::fs::read(Real::new(p.join("file"))).unwrap(), b"x");
        assert_eq!(
            std::fs::write(p.join("file"), b"y")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENAMETOOLONG)
        );
    }

    #[test]
    fn a_short_path_is_kept_as_it_is() {
        let p = PathBuf::from("/a/b");
        assert_eq!(&*Real::new(p.clone()), p.as_path());
    }
}
