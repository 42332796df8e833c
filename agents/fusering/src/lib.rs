//! FUSE for `lachesis-fs`: over io_uring (Linux 6.14+, `CONFIG_FUSE_IO_URING`), with the
//! `/dev/fuse` read loop as the fallback. [`Session`] mounts a connection, negotiates it and
//! hands each request to a [`Handler`] the same way whichever path it came by;
//! [`Dispatcher`] is the handler that decodes requests for a [`Filesystem`].
//!
//! Why a crate of its own: fuser (the FUSE library `lachesis-fs` was first written on) has no
//! io_uring transport and keeps its request parser and reply sender private, so a transport
//! could not be added from outside it. `fusering-probe` (src/bin) puts a trivial file system on
//! the transport to measure what it costs per request, each path against the other in the same
//! run (`bench/datapath/transport.py`).
//!
//! How a request travels (kernel `Documentation/filesystems/fuse-io-uring.rst`):
//!
//! - `/dev/fuse`: a worker thread `read`s one request (header, fixed argument, payload in one
//!   buffer) and `write`s the reply: two system calls and a wake-up of whichever thread reads.
//! - io_uring: per CPU a queue ([`ring`]); each of its entries is a header buffer and a payload
//!   buffer registered with the kernel. The kernel copies a request into a free entry of the
//!   queue of the CPU the application issued it on and completes that entry's command; the
//!   queue's thread answers in place and submits COMMIT_AND_FETCH, which sends the reply and
//!   re-arms the entry in one submission.
//!
//! Until every queue has an entry registered the kernel keeps sending to `/dev/fuse`, and
//! forgets and interrupts always go there, so the read loop runs in both modes.

pub mod abi;
mod devloop;
pub mod dispatch;
pub mod fs;
mod mount;
pub mod probe;
mod ring;
mod session;

pub use abi::InHeader;
pub use dispatch::Dispatcher;
pub use fs::*;
pub use session::{Counters, Session, SessionConfig, Transport};

/// Answers requests. Both transports call it from several threads at once.
pub trait Handler: Send + Sync + 'static {
    /// At INIT: what the kernel offered is in `config`; ask for capabilities there. `conn`
    /// is the connection's `/dev/fuse`, for passthrough.
    fn init(&self, conn: Connection, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = (conn, config);
        Ok(())
    }

    /// Answers one request: `arg` is the opcode's fixed argument (`fuse_read_in`, ...),
    /// `payload` the rest (a name, write data). Writes the reply's body into `out` (as large as
    /// the connection's largest reply) and returns its length, or a positive errno.
    fn handle(
        &self,
        h: &InHeader,
        arg: &[u8],
        payload: &[u8],
        out: &mut [u8],
    ) -> Result<usize, i32>;
}
