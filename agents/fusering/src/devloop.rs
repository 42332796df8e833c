//! The `/dev/fuse` read loop: one request per `read`, one reply per `write`.

use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::Ordering;

use crate::abi::{self, op, InHeader};
use crate::session::Counters;
use crate::Handler;

/// Answers requests from `dev` until the connection goes away.
pub(crate) fn run(dev: &File, handler: &dyn Handler, counters: &Counters, bufsize: usize) {
    let mut req = vec![0u8; bufsize];
    let mut reply = vec![0u8; bufsize];
    loop {
        let n = match (&*dev).read(&mut req) {
            Ok(n) => n,
            // ENOENT: the request was interrupted before it was read; EINTR, EAGAIN: retry.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::EINTR | libc::EAGAIN)
                ) =>
            {
                continue
            }
            // ENODEV: unmounted.
            Err(_) => return,
        };
        let Some(h) = InHeader::decode(&req[..n]) else {
            continue;
        };
        if matches!(h.opcode, op::FORGET | op::BATCH_FORGET | op::INTERRUPT) {
            continue; // no reply
        }
        let body = &req[abi::IN_HEADER..n];
        let split = abi::fixed_arg_len(h.opcode).min(body.len());
        let (arg, payload) = body.split_at(split);
        let len = answer(handler, &h, arg, payload, &mut reply);
        counters.dev_requests.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = (&*dev).write_all(&reply[..len]) {
            // ENOENT: the request was interrupted and is gone; anything else ends the loop.
            if e.raw_os_error() != Some(libc::ENOENT) {
                return;
            }
        }
    }
}

/// Runs the handler and writes header and body into `reply`; returns the reply's length.
pub(crate) fn answer(
    handler: &dyn Handler,
    h: &InHeader,
    arg: &[u8],
    payload: &[u8],
    reply: &mut [u8],
) -> usize {
    let (body, error) = match handler.handle(h, arg, payload, &mut reply[abi::OUT_HEADER..]) {
        Ok(n) => (n, 0),
        Err(errno) => (0, -errno),
    };
    let len = abi::OUT_HEADER + body;
    abi::encode_out_header(reply, len as u32, error, h.unique);
    len
}
