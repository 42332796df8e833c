//! Backing-file IO through io_uring: one ring per FUSE worker thread; the replicas of a
//! scatter write and the files of a sync go in one submission. Falls back to plain
//! `pread`/`pwrite` where io_uring is unavailable (e.g. disabled by sysctl).

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use io_uring::{opcode, types, IoUring};

thread_local! {
    static RING: RefCell<Option<IoUring>> = RefCell::new(IoUring::new(64).ok());
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
    let mut got = 0;
    while got < buf.len() {
        let rest = &mut buf[got..];
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
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// Writes `data` at `off` to every file, all in one submission.
pub fn write_all(files: &[&File], data: &[u8], off: u64) -> io::Result<()> {
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

/// fdatasync of every file, in one submission.
pub fn sync_data(files: &[&File]) -> io::Result<()> {
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
}
