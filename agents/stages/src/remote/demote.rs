//! Level 1's side of demotion (Moirai's global LRU over two levels, `frame.rs`): the clean
//! blocks a level-1 cache evicts go back to the server level they were lent by, through a
//! bounded queue per remote agent that a thread of its own empties. An eviction never waits
//! on the network: when the queue is full the block is dropped (counted) and the server
//! level simply does not get it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Weak};

use super::Client;

/// Blocks waiting to be sent, per remote agent (16 MiB of 4 KiB blocks).
pub const QUEUE_BLOCKS: usize = 4096;

struct Demotion {
    path: Arc<str>,
    off: u64,
    token: u64,
    data: Vec<u8>,
}

/// What happened to the blocks offered so far.
#[derive(Debug, Default)]
pub struct DemoteCounters {
    /// Sent and taken by the server level.
    pub taken: AtomicU64,
    /// Sent and refused (the lend no longer stood: the block was written since).
    pub refused: AtomicU64,
    /// Not sent: the queue was full, or the connection failed.
    pub dropped: AtomicU64,
}

/// The queue to one remote agent.
pub struct DemoteQueue {
    tx: SyncSender<Demotion>,
    counters: Arc<DemoteCounters>,
}

impl DemoteQueue {
    /// A queue whose thread sends through `client` until the client is gone.
    pub fn start(client: Weak<Client>, blocks: usize) -> DemoteQueue {
        let (tx, rx) = mpsc::sync_channel::<Demotion>(blocks);
        let counters = Arc::new(DemoteCounters::default());
        let c = counters.clone();
        let spawned = std::thread::Builder::new()
            .name("demote".into())
            .spawn(move || {
                for d in rx {
                    let Some(client) = client.upgrade() else {
                        return;
                    };
                    let n = match client.demote(&d.path, d.off, d.token, &d.data) {
                        Ok(true) => &c.taken,
                        Ok(false) => &c.refused,
                        Err(_) => &c.dropped,
                    };
                    n.fetch_add(1, Relaxed);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("demotion thread not started, level-1 evictions are dropped: {e}");
        }
        DemoteQueue { tx, counters }
    }

    pub fn counters(&self) -> &DemoteCounters {
        &self.counters
    }

    /// Queues a block without waiting; false (and counted as dropped) when the queue is full.
    fn offer(&self, d: Demotion) -> bool {
        match self.tx.try_send(d) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Relaxed);
                false
            }
        }
    }
}

/// Where a level-1 stage demotes a file's blocks: the remote agent's queue and the file's
/// path there.
#[derive(Clone)]
pub struct DemoteTo {
    queue: Arc<DemoteQueue>,
    path: Arc<str>,
}

impl DemoteTo {
    pub fn new(queue: Arc<DemoteQueue>, path: &str) -> DemoteTo {
        DemoteTo {
            queue,
            path: path.into(),
        }
    }

    /// Offers the block at `off`, lent under `token`; whether it was queued.
    pub fn offer(&self, off: u64, token: u64, data: Vec<u8>) -> bool {
        self.queue.offer(Demotion {
            path: self.path.clone(),
            off,
            token,
            data,
        })
    }
}

/// A block a server level lent to level 1: demote it to `to` with `token` on eviction.
pub struct Lease {
    pub token: u64,
    pub to: DemoteTo,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_never_wait_and_what_cannot_be_queued_is_dropped_and_counted() {
        // A queue of one block whose client is gone: its thread stops at the first block, so
        // later offers find the queue full or closed, return at once and count a drop.
        let q = Arc::new(DemoteQueue::start(Weak::new(), 1));
        let to = DemoteTo::new(q.clone(), "d/f");
        let taken = (0..1000)
            .take_while(|&i| to.offer(i * 4096, 1, vec![0; 4096]))
            .count();
        assert!((1..1000).contains(&taken), "{taken}");
        assert_eq!(q.counters().dropped.load(Relaxed), 1);
        assert!(!to.offer(0, 1, vec![0; 4096]));
        assert_eq!(q.counters().dropped.load(Relaxed), 2);
    }
}
