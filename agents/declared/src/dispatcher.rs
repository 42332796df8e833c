//! The dispatcher: a thread that reads, every quantum, the blocks the planner hands it from
//! the backing files (the device, not the mount: its reads are maintenance IO and must not
//! count as foreground), and gives the bytes back to the planner for their checksums.

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use time::OffsetDateTime;

use crate::planner::{Planner, Work};

/// How often the dispatcher plans.
pub const QUANTUM: Duration = Duration::from_millis(100);

/// Reads one planned block; errors are the planner's (the job fails, saying why).
pub fn run_work(planner: &Planner, w: &Work) {
    let mut buf = vec![0u8; w.claim.len as usize];
    // The read waits its turn at the IO scheduler of the switch over the file (as a class of
    // low weight) and holds the slot while it runs.
    let _slot = planner.admit(&w.backing, w.claim.len);
    let read = std::fs::File::open(&w.backing).and_then(|f| f.read_exact_at(&mut buf, w.claim.off));
    match read {
        Ok(()) => planner.complete(w, &buf),
        Err(e) => {
            tracing::warn!(job = %w.job, file = %w.backing.display(), error = %e, "declared IO read failed");
            planner.fail(w, &e.to_string());
        }
    }
}

/// Starts the dispatcher thread; it ends once `stop` is set.
pub fn spawn(planner: Arc<Planner>, stop: Arc<AtomicBool>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("declared-io".into())
        .spawn(move || {
            let mut last = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(QUANTUM);
                let now = Instant::now();
                let dt = now.duration_since(last).as_secs_f64();
                last = now;
                for w in planner.plan(dt, OffsetDateTime::now_utc()) {
                    run_work(&planner, &w);
                }
            }
        })
}
