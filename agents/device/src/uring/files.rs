//! IO on already-open files through io_uring (the file system's backing and replica files):
//! one ring per thread; the files of a scatter write or a sync go in one submission. Falls back
//! to plain `pread`/`pwrite` where io_uring is unavailable (e.g. disabled by sysctl).
//!
//! [`UringDevice`](super::UringDevice) owns one registered file; these calls take any open
//! files instead, so a FUSE worker can write every replica of a block at once.
//!
//! Files opened with `O_DIRECT` (the application opened its file so) keep it: IO aligned to
//! [`ALIGN`] goes straight to the device, through an aligned bounce buffer when the caller's
//! buffer is not aligned (FUSE's never are); unaligned reads read the aligned blocks around
//! them; unaligned writes, which a local `O_DIRECT` file would refuse but a FUSE file must
//! take, go through the page cache on a buffered twin of the file (the kernel keeps the two
//! coherent).

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use io_uring::{opcode, types, IoUring};

use crate::buf::{is_aligned, AlignedBuf, BUF_ALIGN};

thread_local! {
    static RING: RefCell<Option<IoUring>> = RefCell::new(IoUring::new(64).ok());
    /// This thread's bounce buffer for `O_DIRECT` IO (grows to the largest IO seen).
    static BOUNCE: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

/// Offset, length and buffer alignment that `O_DIRECT` IO needs (the largest logical block
/// size in common use, so it fits every device).
pub const ALIGN: usize = BUF_ALIGN;

/// Runs `f` on the first `len` bytes of this thread's bounce buffer, growing it if needed.
fn with_bounce<T>(len: usize, f: impl FnOnce(&mut [u8]) -> io::Result<T>) -> io::Result<T> {
    BOUNCE.with(|b| {
        let mut b = b.borrow_mut();
        if b.as_ref().is_none_or(|buf| buf.len() < len) {
            let cap = len.max(ALIGN).next_multiple_of(ALIGN);
            *b = Some(AlignedBuf::new(cap).map_err(io::Error::other)?);
        }
        let buf = b.as_mut().expect("allocated above");
        f(&mut buf[..len])
    })
}

/// Whether `f` was opened with `O_DIRECT`.
pub fn is_direct(f: &File) -> bool {
    // SAFETY: F_GETFL on an open descriptor has no memory effects.
    let fl = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
    fl >= 0 && fl & libc::O_DIRECT != 0
}

fn aligned(off: u64, len: usize) -> bool {
    off.is_multiple_of(ALIGN as u64) && len.is_multiple_of(ALIGN)
}

/// The same file without `O_DIRECT`, for the unaligned writes `O_DIRECT` refuses.
fn buffered_twin(f: &File) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Submits `entries` (user_data = their index) and returns each one's result.
fn run(entries: &[io_uring::squeue::Entry]) -> Option<Vec<i32>> {
    RING.with(|r| {
        let mut r = r.borrow_mut();
        let ring = r.as_mut()?;
        let mut results = vec![i32::MIN; entries.len()];
        for chunk in entries.chunks(ring.params().sq_entries() as usize) {
            {
                let mut sq = ring.submission();
                for e in chunk {
                    // SAFETY: the buffers the entries point at outlive this call, which waits
                    // for every completion before returning.
                    unsafe { sq.push(e).ok()? };
                }
            }
            let mut pending = chunk.len();
            while pending > 0 {
                match ring.submit_and_wait(pending) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(_) => return None,
                }
                for cqe in ring.completion() {
                    results[cqe.user_data() as usize] = cqe.result();
                    pending -= 1;
                }
            }
        }
        Some(results)
    })
}

fn check(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}

/// Reads until `buf` is full or end of file.
pub fn read_full(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    read_full_as(f, is_direct(f), buf, off)
}

/// [`read_full`] for a file whose `O_DIRECT` flag the caller knows (a hot path saves the
/// `fcntl` per IO). `direct` may be true for a buffered file (aligned IO works on both),
/// never false for an `O_DIRECT` one.
pub fn read_full_as(f: &File, direct: bool, buf: &mut [u8], off: u64) -> io::Result<usize> {
    if !direct {
        return read_loop(f, buf, off, false);
    }
    if aligned(off, buf.len()) && is_aligned(buf.as_ptr(), 0, ALIGN) {
        return read_loop(f, buf, off, true);
    }
    // The aligned blocks around the range, through the bounce buffer.
    let start = off - off % ALIGN as u64;
    let skip = (off - start) as usize;
    let span = (skip + buf.len()).next_multiple_of(ALIGN);
    with_bounce(span, |tmp| {
        let n = read_loop(f, tmp, start, true)?;
        let got = n.saturating_sub(skip).min(buf.len());
        buf[..got].copy_from_slice(&tmp[skip..skip + got]);
        Ok(got)
    })
}

/// `direct`: a short read is the end of the file (reading on from an unaligned offset would
/// fail with EINVAL).
fn read_loop(f: &File, buf: &mut [u8], off: u64, direct: bool) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let rest = &mut buf[got..];
        let want = rest.len();
        let e = opcode::Read::new(
            types::Fd(f.as_raw_fd()),
            rest.as_mut_ptr(),
            rest.len() as u32,
        )
        .offset(off + got as u64)
        .build()
        .user_data(0);
        let n = match run(&[e]) {
            Some(r) => match check(r[0]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            },
            None => f.read_at(rest, off + got as u64)?,
        };
        got += n;
        if n == 0 || (direct && n < want) {
            break;
        }
    }
    Ok(got)
}

/// Writes `data` at `off` to every file, all in one submission.
pub fn write_all(files: &[&File], data: &[u8], off: u64) -> io::Result<()> {
    write_all_as(files, files.iter().any(|f| is_direct(f)), data, off)
}

/// [`write_all`] for files whose `O_DIRECT` flags the caller knows: `direct` is true when
/// any of them may be `O_DIRECT` (as [`read_full_as`]).
pub fn write_all_as(files: &[&File], direct: bool, data: &[u8], off: u64) -> io::Result<()> {
    if !direct {
        return write_loop(files, data, off);
    }
    if !aligned(off, data.len()) {
        // Rare (the kernel's O_DIRECT callers align): ask each file.
        let twins = files
            .iter()
            .map(|f| is_direct(f).then(|| buffered_twin(f)).transpose())
            .collect::<io::Result<Vec<_>>>()?;
        let refs: Vec<&File> = files
            .iter()
            .zip(&twins)
            .map(|(f, t)| t.as_ref().unwrap_or(f))
            .collect();
        return write_loop(&refs, data, off);
    }
    if is_aligned(data.as_ptr(), 0, ALIGN) {
        return write_loop(files, data, off);
    }
    with_bounce(data.len(), |tmp| {
        tmp.copy_from_slice(data);
        write_loop(files, tmp, off)
    })
}

fn write_loop(files: &[&File], data: &[u8], off: u64) -> io::Result<()> {
    let entries: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            opcode::Write::new(types::Fd(f.as_raw_fd()), data.as_ptr(), data.len() as u32)
                .offset(off)
                .build()
                .user_data(i as u64)
        })
        .collect();
    match run(&entries) {
        Some(results) => {
            for (f, r) in files.iter().zip(results) {
                let n = check(r)?;
                if n < data.len() {
                    // Short write (rare on regular files): finish it synchronously.
                    f.write_all_at(&data[n..], off + n as u64)?;
                }
            }
            Ok(())
        }
        None => files.iter().try_for_each(|f| f.write_all_at(data, off)),
    }
}

/// fdatasync of every file, in one submission. One file is synced on this thread: the ring
/// would hand an fsync to one of its workers (it always blocks), a thread switch each way
/// for nothing to overlap.
pub fn sync_data(files: &[&File]) -> io::Result<()> {
    if let [f] = files {
        return f.sync_data();
    }
    let entries: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            opcode::Fsync::new(types::Fd(f.as_raw_fd()))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(i as u64)
        })
        .collect();
    match run(&entries) {
        Some(results) => results.into_iter().try_for_each(|r| check(r).map(|_| ())),
        None => files.iter().try_for_each(|f| f.sync_data()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn reads_writes_and_syncs_through_the_ring() {
        assert!(
            RING.with(|r| r.borrow().is_some()),
            "io_uring is available here"
        );
        let d = tempfile::tempdir().unwrap();
        let open = |n: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(d.path().join(n))
                .unwrap()
        };
        let (a, b) = (open("a"), open("b"));
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        write_all(&[&a, &b], &data, 4096).unwrap();
        sync_data(&[&a, &b]).unwrap();
        for f in [&a, &b] {
            let mut buf = vec![0u8; 200_000];
            assert_eq!(read_full(f, &mut buf, 4096).unwrap(), 100_000);
            assert_eq!(&buf[..100_000], &data[..]);
        }
        let mut buf = [0u8; 10];
        assert_eq!(read_full(&a, &mut buf, 1 << 30).unwrap(), 0);
        let ro = std::fs::File::open(d.path().join("a")).unwrap();
        let e = write_all(&[&ro], b"x", 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }

    /// Pages of `f` in the page cache (mincore over a mapping of its first `len` bytes).
    fn resident_pages(f: &File, len: usize) -> usize {
        // SAFETY: a shared read-only mapping of an open file, unmapped before returning;
        // mincore writes one byte per page into a vector of that size.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut v = vec![0u8; len.div_ceil(4096)];
            assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
            libc::munmap(p, len);
            v.iter().filter(|b| **b & 1 != 0).count()
        }
    }

    #[test]
    fn o_direct_files_bypass_the_page_cache_at_any_alignment() {
        // /var/tmp is on disk where /tmp may be a tmpfs (which may refuse O_DIRECT).
        let d = tempfile::tempdir_in("/var/tmp").unwrap();
        let open = |n: &str, flags| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(flags)
                .open(d.path().join(n))
                .unwrap()
        };
        let (direct, plain) = (open("d", libc::O_DIRECT), open("p", 0));
        assert!(is_direct(&direct) && !is_direct(&plain));
        let data: Vec<u8> = (0..(1 << 20) + 1).map(|i| (i * 7 % 251) as u8).collect();
        // Unaligned buffer, aligned range: straight to the device through the bounce buffer.
        let body = &data[1..];
        write_all(&[&direct, &plain], body, 0).unwrap();
        assert_eq!(
            resident_pages(&direct, 1 << 20),
            0,
            "O_DIRECT write left pages cached"
        );
        assert!(
            resident_pages(&plain, 1 << 20) > 200,
            "control: buffered write is cached"
        );
        // Unaligned read: the aligned blocks around it.
        let mut buf = vec![0u8; 10_000];
        assert_eq!(read_full(&direct, &mut buf, 4097).unwrap(), 10_000);
        assert_eq!(&buf[..], &body[4097..14_097]);
        assert_eq!(
            resident_pages(&direct, 1 << 20),
            0,
            "O_DIRECT read filled the cache"
        );
        // Unaligned write (the buffered twin), then read past the end of the file.
        write_all(&[&direct], b"hello", (1 << 20) - 2).unwrap();
        let mut tail = vec![0u8; 8192];
        assert_eq!(read_full(&direct, &mut tail, (1 << 20) - 4).unwrap(), 7);
        assert_eq!(
            &tail[..7],
            &[
                body[(1 << 20) - 4],
                body[(1 << 20) - 3],
                b'h',
                b'e',
                b'l',
                b'l',
                b'o'
            ]
        );
        assert_eq!(direct.metadata().unwrap().len(), (1 << 20) + 3);
        let mut end = [0u8; 4096];
        assert_eq!(read_full(&direct, &mut end, 2 << 20).unwrap(), 0);
    }
}
