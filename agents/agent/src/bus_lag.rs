//! How far the agent is behind its bus: when the control loop last read desired state (the
//! desired key at a resync, or an `XREAD` of the inbox, which returns at least every block
//! interval while Redis answers) and the last inbox entry it has read. The runner records
//! both ([`BusProgress::read`]); the metrics endpoint turns them into the bus-lag metrics
//! (`src/metrics_http.rs`), asking Redis how many inbox entries lie beyond that entry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The control loop's progress on the bus; shared between the runner and the read-outs.
#[derive(Debug)]
pub struct BusProgress {
    started: Instant,
    /// Milliseconds after `started` of the last read, plus one (0: never read).
    last_read: AtomicU64,
    /// Id of the last inbox entry read (where the next `XREAD` starts).
    inbox_id: Mutex<Option<String>>,
}

impl Default for BusProgress {
    fn default() -> Self {
        BusProgress {
            started: Instant::now(),
            last_read: AtomicU64::new(0),
            inbox_id: Mutex::new(None),
        }
    }
}

impl BusProgress {
    /// The control loop has read the bus, up to inbox entry `inbox_id`.
    pub fn read(&self, inbox_id: &str) {
        *self.inbox_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(inbox_id.to_string());
        let ms = self.started.elapsed().as_millis() as u64;
        self.last_read.store(ms + 1, Ordering::Relaxed);
    }

    /// How long ago the last read was; None before the first.
    pub fn since_last_read(&self) -> Option<Duration> {
        match self.last_read.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }

    /// The last inbox entry read; None before the first read.
    pub fn inbox_id(&self) -> Option<String> {
        self.inbox_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_known_before_the_first_read() {
        let p = BusProgress::default();
        assert_eq!((p.since_last_read(), p.inbox_id()), (None, None));
        p.read("5-0");
        assert!(p.since_last_read().is_some());
        assert_eq!(p.inbox_id().as_deref(), Some("5-0"));
        p.read("7-1");
        assert_eq!(p.inbox_id().as_deref(), Some("7-1"));
    }
}
