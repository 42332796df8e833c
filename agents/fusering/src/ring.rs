//! One FUSE-over-io_uring queue: its entries, registered with the kernel, and the thread that
//! answers what arrives in them.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::abi::{self, uring, InHeader};
use crate::session::Counters;
use crate::Handler;

/// A queue: `depth` entries for CPU `qid`, each with a payload buffer of `payload` bytes.
pub(crate) struct Queue {
    pub qid: u16,
    pub depth: u16,
    pub payload: usize,
}

/// An entry's buffers. The kernel keeps their addresses from REGISTER on, so they are
/// allocated once and never move (a boxed slice of entries, each with boxed buffers).
struct Entry {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    iov: [libc::iovec; 2],
}

impl Queue {
    /// Registers the entries and answers requests until the connection goes away.
    /// `registered` hears once whether the kernel took every entry (so the caller can wait
    /// until requests go to io_uring before it returns).
    pub(crate) fn run(
        &self,
        dev: &File,
        handler: &dyn Handler,
        counters: &Counters,
        registered: std::sync::mpsc::Sender<io::Result<()>>,
    ) -> io::Result<()> {
        pin_to_cpu(self.qid as usize);
        let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
            IoUring::builder().build(u32::from(self.depth).next_power_of_two())?;
        let mut entries: Box<[Entry]> = (0..self.depth)
            .map(|_| Entry {
                header: vec![0u8; uring::HEADER_LEN].into_boxed_slice(),
                payload: vec![0u8; self.payload].into_boxed_slice(),
                iov: [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; 2],
            })
            .collect();
        let fd = types::Fd(dev.as_raw_fd());
        for (i, e) in entries.iter_mut().enumerate() {
            e.iov = [
                libc::iovec {
                    iov_base: e.header.as_mut_ptr().cast(),
                    iov_len: e.header.len(),
                },
                libc::iovec {
                    iov_base: e.payload.as_mut_ptr().cast(),
                    iov_len: e.payload.len(),
                },
            ];
            let sqe = opcode::UringCmd80::new(fd, uring::CMD_REGISTER)
                .cmd(uring::cmd_req(0, self.qid))
                .addr(Some(e.iov.as_ptr() as u64))
                .build()
                .user_data(i as u64);
            push(&mut ring, with_len(sqe, uring::IOV_SEGS))?;
        }
        // REGISTER is handled while the SQE is submitted: an entry the kernel refused has its
        // completion posted by the time `submit` returns. A taken one completes when a request
        // arrives, and that can be at once: the kernel sends requests to the queues as soon as
        // every queue has one entry, while this thread's others may still be registering. So
        // the completions found here are sorted, never consumed blindly: a request among them
        // is answered like any other (one dropped here was never answered, and its caller
        // waited for ever, beyond the reach of any signal).
        if let Err(e) = ring.submit() {
            let _ = registered.send(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
        let first: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let (mut done, refused) = registration(first);
        let taken = u64::from(self.depth) - refused.len() as u64;
        counters.ring_entries.fetch_add(taken, Ordering::Relaxed);
        match refused.first() {
            None => {
                let _ = registered.send(Ok(()));
            }
            Some(&errno) => {
                let _ = registered.send(Err(io::Error::from_raw_os_error(errno)));
                if taken == 0 {
                    return Err(io::Error::from_raw_os_error(errno));
                }
                // Entries the kernel took can hold requests already: they are served.
            }
        }
        let mut live = taken;
        let mut scratch = vec![0u8; self.payload];
        loop {
            for (i, res) in done.drain(..) {
                if res < 0 {
                    match -res {
                        // The connection was unmounted or aborted: the queue's work is over.
                        libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ECANCELED => {
                            return Ok(())
                        }
                        // This entry is gone (the kernel did not re-arm it); the others of the
                        // thread still hold or will get requests, so they go on.
                        errno => {
                            counters.note_ring_error(format!(
                                "queue {} entry {i}: {}",
                                self.qid,
                                io::Error::from_raw_os_error(errno)
                            ));
                            live -= 1;
                            if live == 0 {
                                return Err(io::Error::from_raw_os_error(errno));
                            }
                            continue;
                        }
                    }
                }
                let e = &mut entries[i as usize];
                let commit_id = abi::u64_at(&e.header, uring::COMMIT_ID);
                answer(e, &mut scratch, handler);
                counters.ring_requests.fetch_add(1, Ordering::Relaxed);
                let sqe = opcode::UringCmd80::new(fd, uring::CMD_COMMIT_AND_FETCH)
                    .cmd(uring::cmd_req(commit_id, self.qid))
                    .build()
                    .user_data(i);
                push(&mut ring, sqe)?;
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            done = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
        }
    }
}

/// Sorts the completions found right after the entries were registered: the requests that
/// arrived already (result >= 0: each to be answered) and the errnos of the entries the
/// kernel refused.
fn registration(completions: Vec<(u64, i32)>) -> (Vec<(u64, i32)>, Vec<i32>) {
    let (refused, arrived): (Vec<_>, Vec<_>) = completions.into_iter().partition(|(_, r)| *r < 0);
    (arrived, refused.into_iter().map(|(_, r)| -r).collect())
}

/// Answers the request in `e` in place: the out header over the in header, the reply's body
/// in the payload buffer. A request that carries a payload (a write's data, a name) is
/// answered into `scratch` first and its reply (8 bytes for a write) copied over, so the
/// payload is never copied; a read's reply goes straight into the payload buffer.
fn answer(e: &mut Entry, scratch: &mut [u8], handler: &dyn Handler) {
    let payload_sz = (abi::u32_at(&e.header, uring::PAYLOAD_SZ) as usize).min(e.payload.len());
    let h = InHeader::decode(&e.header[uring::IN_OUT..uring::IN_OUT + uring::IN_OUT_LEN])
        .expect("the in_out area holds a header");
    // The kernel's in header counts header, fixed argument and payload.
    let arg_len = (h.len as usize)
        .saturating_sub(abi::IN_HEADER + payload_sz)
        .min(uring::OP_IN_LEN);
    let mut arg = [0u8; uring::OP_IN_LEN];
    arg[..arg_len].copy_from_slice(&e.header[uring::OP_IN..uring::OP_IN + arg_len]);
    let arg = &arg[..arg_len];
    let result = if payload_sz > 0 {
        let r = handler.handle(&h, arg, &e.payload[..payload_sz], scratch);
        if let Ok(n) = r {
            e.payload[..n].copy_from_slice(&scratch[..n]);
        }
        r
    } else {
        handler.handle(&h, arg, &[], &mut e.payload)
    };
    let (body, error) = match result {
        Ok(n) => (n, 0),
        Err(errno) => (0, -errno),
    };
    let len = (abi::OUT_HEADER + body) as u32;
    abi::encode_out_header(&mut e.header[uring::IN_OUT..], len, error, h.unique);
    abi::put_u32(&mut e.header, uring::PAYLOAD_SZ, body as u32);
}

/// Sets the SQE's `len` (the iovec count REGISTER carries), which the opcode builder does not.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is `repr(C)`: a 64-byte `io_uring_sqe` then 64 bytes of command, 128
    // bytes with no padding; `len` is the `u32` at byte 24 of `io_uring_sqe`.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    unsafe { std::mem::transmute(raw) }
}

fn push(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    sqe: squeue::Entry128,
) -> io::Result<()> {
    // SAFETY: every buffer an SQE names belongs to an entry that lives as long as the ring.
    while unsafe { ring.submission().push(&sqe) }.is_err() {
        ring.submit()?;
    }
    Ok(())
}

/// Runs the queue's thread on its CPU, where the kernel queues that CPU's requests. Best
/// effort: a CPU outside the process's affinity leaves the thread where it is.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::registration;

    #[test]
    fn requests_that_arrive_while_registering_are_kept_for_an_answer() {
        // Entry 0 got a request at once, entry 1 was refused, entry 2 got one too.
        let (arrived, refused) = registration(vec![(0, 0), (1, -libc::EAGAIN), (2, 0)]);
        assert_eq!(arrived, vec![(0, 0), (2, 0)]);
        assert_eq!(refused, vec![libc::EAGAIN]);
        let (arrived, refused) = registration(vec![]);
        assert!(arrived.is_empty() && refused.is_empty());
    }
}
