//! The measuring device: data really stored in a file (O_DIRECT through io_uring) and read
//! back, and the simulated FDP SSD's FTL fed every write and trim with its placement handle:
//! DLWA per handle, the FDP effect of separating streams, deallocation, concurrency, restarts,
//! spec strings. Counts and ratios only; no timings.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lachesis_device::measured::{
    parse_size, MeasuredDevice, MeasuredOptions, MeasuredSpec, MeasuredStats,
    DEFAULT_RECLAIM_UNIT_BYTES,
};
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::SimSsd;
use lachesis_device::{
    AlignedBuf, BlockDevice, Error, FdpLogs, IoRequest, Placement, PlacementHandle,
};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

fn open(dir: &tempfile::TempDir, name: &str, size: u64, o: MeasuredOptions) -> MeasuredDevice {
    MeasuredDevice::open(dir.path().join(name), size, o).unwrap()
}

/// Page `p`'s content when written with `seed`: every 8 bytes name the page and the seed.
fn fill(buf: &mut [u8], first_page: u64, seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let page = first_page + (i as u64 * 8) / PAGE;
        chunk.copy_from_slice(&(page << 16 ^ seed).to_le_bytes());
    }
}

fn pattern(first_page: u64, pages: u64, seed: u64) -> AlignedBuf {
    let mut b = AlignedBuf::new((pages * PAGE) as usize).unwrap();
    fill(&mut b, first_page, seed);
    b
}

fn handle_stat(s: &MeasuredStats, h: u16) -> &lachesis_device::measured::HandleStats {
    &s.handles[usize::from(h)]
}

#[test]
fn data_written_is_read_back_and_the_geometry_is_fdp() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = open(&dir, "d", 8 * MIB, MeasuredOptions::default());
    let g = dev.geometry().clone();
    assert_eq!(g.capacity_bytes, 8 * MIB);
    assert_eq!(g.block_size, 4096);
    assert_eq!(g.placement_handles, 8);
    assert_eq!(g.placement, Placement::Fdp);
    assert_eq!(g.reclaim_groups, 1);
    // 8 MiB is too small for 1 MiB units with 8 handles at 7%: the default unit shrinks.
    assert!(g.reclaim_unit_bytes >= 4 * PAGE && g.reclaim_unit_bytes < DEFAULT_RECLAIM_UNIT_BYTES);
    assert_eq!(dev.stats().reclaim_unit_bytes, g.reclaim_unit_bytes);

    // Single writes on several handles, aligned and unaligned buffers.
    let a = pattern(0, 16, 1);
    dev.write(0, &a, PlacementHandle(0)).unwrap();
    let b: Vec<u8> = pattern(100, 3, 2).to_vec(); // a Vec: not 4 KiB aligned in memory
    dev.write(100 * PAGE, &b, PlacementHandle(5)).unwrap();
    // A batch of writes and reads.
    let c = pattern(200, 8, 3);
    let d = pattern(300, 1, 4);
    let mut back_a = AlignedBuf::new(a.len()).unwrap();
    dev.submit_batch(&mut [
        IoRequest::Write {
            offset: 200 * PAGE,
            buf: &c,
            handle: PlacementHandle(7),
        },
        IoRequest::Write {
            offset: 300 * PAGE,
            buf: &d,
            handle: PlacementHandle(1),
        },
        IoRequest::Read {
            offset: 0,
            buf: &mut back_a,
        },
    ])
    .unwrap();
    dev.flush().unwrap();
    assert_eq!(&back_a[..], &a[..]);
    for (page, want) in [(100, &b[..]), (200, &c[..]), (300, &d[..])] {
        let mut got = vec![0u8; want.len()];
        dev.read(page * PAGE, &mut got).unwrap();
        assert_eq!(got, want, "page {page}");
    }
    // The file holds the data.
    let raw = std::fs::read(dir.path().join("d")).unwrap();
    assert_eq!(&raw[200 * PAGE as usize..208 * PAGE as usize], &c[..]);

    // Trim: the data is gone from the file (a hole reads as zeroes) and from the model.
    dev.trim(200 * PAGE, 8 * PAGE).unwrap();
    let mut got = AlignedBuf::new(c.len()).unwrap();
    dev.read(200 * PAGE, &mut got).unwrap();
    assert!(got.iter().all(|&x| x == 0));
    let s = dev.stats();
    assert_eq!(s.host_bytes_written, (16 + 3 + 8 + 1) * PAGE);
    assert_eq!(s.bytes_deallocated, 8 * PAGE);
    assert_eq!(handle_stat(&s, 7).bytes_deallocated, 8 * PAGE);
    assert_eq!(handle_stat(&s, 7).valid_bytes, 0);
    assert_eq!(handle_stat(&s, 0).valid_bytes, 16 * PAGE);
    assert_eq!(
        s.host_bytes_read,
        (16 + 3 + 8 + 1 + 8) * PAGE,
        "batch read, three single reads and the read after trim"
    );
    dev.check_invariants().unwrap();

    // Bad input is refused before it reaches the file or the model.
    let before = dev.stats();
    let e = dev.write(0, &a[..4096], PlacementHandle(8)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnknownPlacementHandle {
                handle: 8,
                available: 8
            }
        ),
        "{e}"
    );
    let e = dev.write(1, &a[..4096], PlacementHandle(0)).unwrap_err();
    assert!(matches!(e, Error::Unaligned { .. }), "{e}");
    let e = dev
        .write(8 * MIB, &a[..4096], PlacementHandle(0))
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    let e = dev.trim(8 * MIB - PAGE, 2 * PAGE).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    let e = dev
        .submit_batch(&mut [
            IoRequest::Write {
                offset: 0,
                buf: &a,
                handle: PlacementHandle(1),
            },
            IoRequest::Write {
                offset: PAGE,
                buf: &a[..4096],
                handle: PlacementHandle(9),
            },
        ])
        .unwrap_err();
    assert!(matches!(e, Error::Batch { index: 1, .. }), "{e}");
    assert_eq!(
        dev.stats(),
        before,
        "nothing of a refused batch was issued or counted"
    );
    let mut back = AlignedBuf::new(a.len()).unwrap();
    dev.read(0, &mut back).unwrap();
    assert_eq!(&back[..], &a[..], "the refused batch wrote nothing");
}

#[test]
fn reopening_keeps_the_data_and_starts_the_model_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d");
    let data = pattern(10, 32, 9);
    let first = {
        let mut dev = MeasuredDevice::open(&path, 4 * MIB, MeasuredOptions::default()).unwrap();
        dev.write(10 * PAGE, &data, PlacementHandle(3)).unwrap();
        dev.flush().unwrap();
        let s = dev.stats();
        assert_eq!(s.host_bytes_written, 32 * PAGE);
        s
    };
    let mut dev = MeasuredDevice::open(&path, 4 * MIB, MeasuredOptions::default()).unwrap();
    let mut back = AlignedBuf::new(data.len()).unwrap();
    dev.read(10 * PAGE, &mut back).unwrap();
    assert_eq!(&back[..], &data[..]);
    let s = dev.stats();
    assert_eq!(s.host_bytes_written, 0, "counters are since open");
    assert_eq!(s.media_bytes_written, 0);
    assert_eq!(handle_stat(&s, 3).valid_bytes, 0, "the model starts empty");
    assert_eq!(s.dlwa, None);
    assert_eq!(
        (s.gc_victims, s.bytes_deallocated),
        (0, 0),
        "a fresh model: {s:?} after {first:?}"
    );
    drop(dev);
    // Opening with a smaller size uses a prefix of the file and truncates nothing.
    let dev = MeasuredDevice::open(&path, 3 * MIB, MeasuredOptions::default()).unwrap();
    assert_eq!(dev.geometry().capacity_bytes, 3 * MIB);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * MIB);
    // A larger size extends the file.
    drop(dev);
    let dev = MeasuredDevice::open(&path, 6 * MIB, MeasuredOptions::default()).unwrap();
    assert_eq!(dev.geometry().capacity_bytes, 6 * MIB);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 6 * MIB);
}

/// One IO of a synthetic workload: `pages` pages from `page` through `handle`.
#[derive(Clone, Copy)]
struct Io {
    page: u64,
    pages: u64,
    handle: PlacementHandle,
}

/// Runs `ios` on the device in batches of `batch` (the writes share one buffer of `max_pages`
/// pages: the model does not look at the data) and on a `SimSsd` built from the device's model
/// configuration, page by page, as the simulator's own tests drive it.
fn run(dev: &mut MeasuredDevice, sim: &mut SimSsd, ios: &[Io], batch: usize) {
    let max_pages = ios.iter().map(|i| i.pages).max().unwrap_or(1);
    let buf = pattern(0, max_pages, 0);
    for chunk in ios.chunks(batch) {
        let mut reqs: Vec<IoRequest<'_>> = chunk
            .iter()
            .map(|io| IoRequest::Write {
                offset: io.page * PAGE,
                buf: &buf[..(io.pages * PAGE) as usize],
                handle: io.handle,
            })
            .collect();
        dev.submit_batch(&mut reqs).unwrap();
        for io in chunk {
            sim.write_pages(io.page, io.pages, io.handle).unwrap();
        }
    }
}

/// A small hot region rewritten at random one page at a time (high invalidation rate) and a
/// large cold log written sequentially 8 pages at a time and wrapping (each page lives a whole
/// lap), the stream chosen at random per IO so each carries half of the host pages: the FDP
/// paper's setup. Returns the fill (everything once) and `laps` laps of the log.
fn hot_and_cold(
    total_pages: u64,
    hot: PlacementHandle,
    cold: PlacementHandle,
    laps: u64,
    seed: u64,
) -> (Vec<Io>, Vec<Io>) {
    const LOG_IO: u64 = 8;
    let log_pages = total_pages * 9 / 10 / LOG_IO * LOG_IO;
    let hot_pages = total_pages - log_pages;
    let log_start = hot_pages;
    let mut fill = vec![];
    for p in (0..hot_pages).step_by(LOG_IO as usize) {
        fill.push(Io {
            page: p,
            pages: LOG_IO.min(hot_pages - p),
            handle: hot,
        });
    }
    for p in (0..log_pages).step_by(LOG_IO as usize) {
        fill.push(Io {
            page: log_start + p,
            pages: LOG_IO,
            handle: cold,
        });
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut ios = vec![];
    let mut log_written = 0;
    while log_written < laps * log_pages {
        // A log IO carries LOG_IO pages: one IO in LOG_IO + 1 halves the pages.
        if rng.random_range(0..=LOG_IO) == 0 {
            ios.push(Io {
                page: log_start + log_written % log_pages,
                pages: LOG_IO,
                handle: cold,
            });
            log_written += LOG_IO;
        } else {
            ios.push(Io {
                page: rng.random_range(0..hot_pages),
                pages: 1,
                handle: hot,
            });
        }
    }
    (fill, ios)
}

/// The same hot/cold workload through two handles and through one: returns (DLWA over the
/// last three laps, the device's stats), after checking the device measured exactly what the
/// simulator measures for the same writes.
fn hot_and_cold_dlwa(dir: &tempfile::TempDir, name: &str, separate: bool) -> (f64, MeasuredStats) {
    let o = MeasuredOptions {
        handles: 2,
        overprovisioning: 0.10,
        reclaim_unit_bytes: Some(32 * PAGE),
        ..MeasuredOptions::default()
    };
    let mut dev = open(dir, name, 16 * MIB, o);
    let mut sim = SimSsd::with_handle_accounting(dev.sim_config().clone()).unwrap();
    let pages = dev.geometry().capacity_bytes / PAGE;
    let cold = PlacementHandle(u16::from(separate));
    let (fill, ios) = hot_and_cold(pages, PlacementHandle(0), cold, 6, 11);
    run(&mut dev, &mut sim, &fill, 64);
    let (warm, measured) = ios.split_at(ios.len() / 2);
    run(&mut dev, &mut sim, warm, 64);
    let before = dev.stats();
    run(&mut dev, &mut sim, measured, 64);
    let after = dev.stats();
    dev.check_invariants().unwrap();

    // The device's model and the simulator agree exactly, in total and per handle.
    let s = sim.stats();
    assert_eq!(after.host_bytes_written, s.host_pages_written * PAGE);
    assert_eq!(after.media_bytes_written, s.media_pages_written() * PAGE);
    assert_eq!(after.gc_victims, s.gc_victims);
    let fdp = dev.fdp_stats().unwrap();
    assert_eq!(fdp, sim.fdp_statistics());
    for (h, c) in sim.handle_counters().unwrap().iter().enumerate() {
        let d = handle_stat(&after, h as u16);
        assert_eq!(
            d.host_bytes_written,
            c.host_pages_written * PAGE,
            "handle {h}"
        );
        assert_eq!(
            d.media_bytes_written,
            c.media_pages_written() * PAGE,
            "handle {h}"
        );
    }
    // And the last data written really is in the file.
    let last = measured.last().unwrap();
    let mut back = AlignedBuf::new((last.pages * PAGE) as usize).unwrap();
    dev.read(last.page * PAGE, &mut back).unwrap();
    assert_eq!(&back[..], &pattern(0, last.pages, 0)[..]);
    (after.dlwa_since(&before).unwrap(), after)
}

#[test]
fn separate_handles_for_different_invalidation_rates_lower_dlwa() {
    let dir = tempfile::tempdir().unwrap();
    let (one, one_stats) = hot_and_cold_dlwa(&dir, "one", false);
    let (two, two_stats) = hot_and_cold_dlwa(&dir, "two", true);
    eprintln!("hot/cold DLWA: one handle {one:.3}, two handles {two:.3}");
    assert!(one >= 2.0, "one handle: DLWA {one:.3}");
    assert!(two <= 1.5, "two handles: DLWA {two:.3}");
    assert!(two * 1.5 < one, "two handles {two:.3} vs one {one:.3}");
    // Same host writes either way.
    assert_eq!(one_stats.host_bytes_written, two_stats.host_bytes_written);
    assert!(one_stats.gc_bytes_relocated > 2 * two_stats.gc_bytes_relocated);
    // With two handles the cold log barely moves; the hot stream pays for its own GC.
    let (hot, cold) = (handle_stat(&two_stats, 0), handle_stat(&two_stats, 1));
    let cold_dlwa = cold.dlwa.unwrap();
    let hot_dlwa = hot.dlwa.unwrap();
    assert!(cold_dlwa < 1.1, "cold handle DLWA {cold_dlwa:.3}");
    assert!(
        hot_dlwa > cold_dlwa,
        "hot {hot_dlwa:.3} vs cold {cold_dlwa:.3}"
    );
    // With one handle everything is charged to handle 0.
    assert_eq!(
        handle_stat(&one_stats, 0).media_bytes_written,
        one_stats.media_bytes_written
    );
    assert_eq!(handle_stat(&one_stats, 1).host_bytes_written, 0);
    assert_eq!(handle_stat(&one_stats, 1).dlwa, None);
}

#[test]
fn deallocate_reduces_gc() {
    let dir = tempfile::tempdir().unwrap();
    let o = MeasuredOptions {
        handles: 1,
        reclaim_unit_bytes: Some(16 * PAGE),
        ..MeasuredOptions::default()
    };
    let mut results = vec![];
    for trim in [false, true] {
        let mut dev = open(&dir, &format!("trim-{trim}"), 16 * MIB, o.clone());
        let mut sim = SimSsd::with_handle_accounting(dev.sim_config().clone()).unwrap();
        let pages = dev.geometry().capacity_bytes / PAGE;
        let h = PlacementHandle(0);
        let fill: Vec<Io> = (0..pages)
            .step_by(16)
            .map(|p| Io {
                page: p,
                pages: 16,
                handle: h,
            })
            .collect();
        run(&mut dev, &mut sim, &fill, 32);
        if trim {
            // The second half is no longer needed: say so.
            dev.trim(pages / 2 * PAGE, pages / 2 * PAGE).unwrap();
        }
        let mut rng = SmallRng::seed_from_u64(5);
        let ios: Vec<Io> = (0..3 * pages / 2)
            .map(|_| Io {
                page: rng.random_range(0..pages / 2),
                pages: 1,
                handle: h,
            })
            .collect();
        run(&mut dev, &mut sim, &ios, 64);
        dev.check_invariants().unwrap();
        let s = dev.stats();
        assert_eq!(s.bytes_deallocated, if trim { pages / 2 * PAGE } else { 0 });
        results.push(s);
    }
    let (kept, trimmed) = (&results[0], &results[1]);
    eprintln!(
        "relocated without trim {} MiB (DLWA {:.3}), with {} MiB (DLWA {:.3})",
        kept.gc_bytes_relocated / MIB,
        kept.dlwa.unwrap(),
        trimmed.gc_bytes_relocated / MIB,
        trimmed.dlwa.unwrap()
    );
    assert_eq!(kept.host_bytes_written, trimmed.host_bytes_written);
    assert!(kept.gc_bytes_relocated > 0);
    assert!(
        trimmed.gc_bytes_relocated * 4 < kept.gc_bytes_relocated,
        "trim: {} relocated bytes vs {} without",
        trimmed.gc_bytes_relocated,
        kept.gc_bytes_relocated
    );
    assert!(trimmed.gc_victims_with_data < kept.gc_victims_with_data);
}

#[test]
fn per_handle_host_bytes_equal_what_each_handle_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = open(&dir, "d", 8 * MIB, MeasuredOptions::default());
    let pages = dev.geometry().capacity_bytes / PAGE;
    let mut written = [0u64; 8];
    let mut rng = SmallRng::seed_from_u64(3);
    let buf = pattern(0, 8, 1);
    // About three device capacities, so garbage collection runs; handle 7 is never used.
    let mut total = 0;
    let mut n = 0u64;
    while total < 3 * pages {
        let len = rng.random_range(1..=8u64);
        let page = rng.random_range(0..=pages - len);
        let h = rng.random_range(0..7u16);
        if n.is_multiple_of(5) {
            // Now and then a batch of two.
            let page2 = rng.random_range(0..pages);
            dev.submit_batch(&mut [
                IoRequest::Write {
                    offset: page * PAGE,
                    buf: &buf[..(len * PAGE) as usize],
                    handle: PlacementHandle(h),
                },
                IoRequest::Write {
                    offset: page2 * PAGE,
                    buf: &buf[..PAGE as usize],
                    handle: PlacementHandle(6 - h),
                },
            ])
            .unwrap();
            written[usize::from(6 - h)] += PAGE;
            total += 1;
        } else {
            dev.write(
                page * PAGE,
                &buf[..(len * PAGE) as usize],
                PlacementHandle(h),
            )
            .unwrap();
        }
        written[usize::from(h)] += len * PAGE;
        total += len;
        n += 1;
    }
    let s = dev.stats();
    assert_eq!(s.handles.len(), 8);
    for (h, w) in written.iter().enumerate() {
        assert_eq!(s.handles[h].handle, h as u16);
        assert_eq!(s.handles[h].host_bytes_written, *w, "handle {h}");
    }
    assert_eq!(s.handles[7].dlwa, None);
    assert!(s.gc_bytes_relocated > 0, "garbage collection ran");
    let sum = |f: fn(&lachesis_device::measured::HandleStats) -> u64| -> u64 {
        s.handles.iter().map(f).sum()
    };
    assert_eq!(sum(|h| h.host_bytes_written), s.host_bytes_written);
    assert_eq!(sum(|h| h.media_bytes_written), s.media_bytes_written);
    assert_eq!(sum(|h| h.gc_bytes_relocated), s.gc_bytes_relocated);
    assert_eq!(
        s.media_bytes_written,
        s.host_bytes_written + s.gc_bytes_relocated
    );
    assert!(sum(|h| h.valid_bytes) <= s.capacity_bytes);
    for h in &s.handles[..7] {
        let d = h.dlwa.unwrap();
        assert!(d >= 1.0, "{h:?}");
        assert_eq!(
            d,
            h.media_bytes_written as f64 / h.host_bytes_written as f64
        );
    }
    dev.check_invariants().unwrap();
}

#[test]
fn concurrent_workers_and_a_shared_lock() {
    let dir = tempfile::tempdir().unwrap();
    let dev = open(&dir, "d", 16 * MIB, MeasuredOptions::default());
    let pages = dev.geometry().capacity_bytes / PAGE;
    let reader = dev.stats_reader();
    let threads = 4u64;
    let region = pages / threads;
    let writes_per_thread = 2 * region; // twice its region: the model's GC runs under load

    // Each thread: its own ring, its own handle and region.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (reader, stop) = (reader.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut last = reader.stats();
            let mut seen = 0;
            while !stop.load(Ordering::Relaxed) || seen == 0 {
                let s = reader.stats();
                assert!(s.host_bytes_written >= last.host_bytes_written);
                assert!(s.media_bytes_written >= s.host_bytes_written);
                let per: u64 = s.handles.iter().map(|h| h.host_bytes_written).sum();
                assert_eq!(per, s.host_bytes_written, "a snapshot is consistent");
                last = s;
                seen += 1;
                std::thread::yield_now();
            }
            seen
        })
    };
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let mut w = dev.worker().unwrap();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut buf = AlignedBuf::new(PAGE as usize).unwrap();
                let mut last = vec![None; region as usize];
                for i in 0..writes_per_thread {
                    let p = rng.random_range(0..region);
                    let page = t * region + p;
                    fill(&mut buf, page, i);
                    w.write(page * PAGE, &buf, PlacementHandle(t as u16))
                        .unwrap();
                    last[p as usize] = Some(i);
                }
                // Read back this thread's pages.
                for (p, seed) in last.iter().enumerate() {
                    let Some(seed) = seed else { continue };
                    let page = t * region + p as u64;
                    w.read(page * PAGE, &mut buf).unwrap();
                    let mut want = vec![0u8; PAGE as usize];
                    fill(&mut want, page, *seed);
                    assert_eq!(&buf[..], &want[..], "page {page}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(watcher.join().unwrap() > 0);
    let s = reader.stats();
    for t in 0..threads {
        let h = handle_stat(&s, t as u16);
        assert_eq!(h.host_bytes_written, writes_per_thread * PAGE, "handle {t}");
    }
    assert_eq!(s.host_bytes_written, threads * writes_per_thread * PAGE);
    assert_eq!(s, dev.stats());
    dev.check_invariants().unwrap();

    // One device behind a lock, as `lachesis_cache::share` wraps it, used by several threads
    // (the default ring is not single-issuer, so any thread holding the lock may submit).
    let reader = dev.stats_reader();
    let shared: Arc<Mutex<dyn BlockDevice + Send>> = Arc::new(Mutex::new(dev));
    let users: Vec<_> = (0..3u64)
        .map(|t| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                let mut buf = AlignedBuf::new(2 * PAGE as usize).unwrap();
                for i in 0..200 {
                    let page = t * region + (i * 2) % region;
                    fill(&mut buf, page, t);
                    shared
                        .lock()
                        .unwrap()
                        .write(page * PAGE, &buf, PlacementHandle(4 + t as u16))
                        .unwrap();
                }
            })
        })
        .collect();
    let mut polls = 0;
    while users.iter().any(|u| !u.is_finished()) {
        let s = reader.stats();
        assert!(s.media_bytes_written >= s.host_bytes_written);
        polls += 1;
        std::thread::yield_now();
    }
    for u in users {
        u.join().unwrap();
    }
    assert!(polls > 0);
    let s = reader.stats();
    for t in 0..3u16 {
        assert_eq!(handle_stat(&s, 4 + t).host_bytes_written, 200 * 2 * PAGE);
    }
    let mut dev = shared.lock().unwrap();
    let mut back = AlignedBuf::new(2 * PAGE as usize).unwrap();
    let mut want = AlignedBuf::new(2 * PAGE as usize).unwrap();
    for t in 0..3u64 {
        let page = t * region + (199 * 2) % region;
        dev.read(page * PAGE, &mut back).unwrap();
        fill(&mut want, page, t);
        assert_eq!(&back[..], &want[..]);
    }
}

#[test]
fn spec_strings_parse_open_and_round_trip() {
    let s = MeasuredSpec::parse("measured:/var/lib/lachesis/flash0.img:1GiB").unwrap();
    assert_eq!(s.path, std::path::Path::new("/var/lib/lachesis/flash0.img"));
    assert_eq!(s.size_bytes, 1 << 30);
    assert_eq!(s.options, MeasuredOptions::default());
    assert_eq!(
        s.to_string(),
        "measured:/var/lib/lachesis/flash0.img:1073741824"
    );

    let s: MeasuredSpec =
        "measured:/tmp/a:b.img:512MiB:handles=4,op=10%,ru=256KiB,isolation=persistent,reserve=3,qd=8,direct=false"
            .parse()
            .unwrap();
    assert_eq!(s.path, std::path::Path::new("/tmp/a:b.img"));
    assert_eq!(s.size_bytes, 512 << 20);
    let want = MeasuredOptions {
        handles: 4,
        overprovisioning: 0.10,
        reclaim_unit_bytes: Some(256 << 10),
        isolation: RuhType::PersistentlyIsolated,
        gc_reserve_rus: 3,
        queue_depth: 8,
        direct: false,
        ..MeasuredOptions::default()
    };
    assert_eq!(s.options, want);
    assert_eq!(MeasuredSpec::parse(&s.to_string()).unwrap(), s);
    assert_eq!(
        MeasuredSpec::parse("measured:/x:4MiB:op=0.2")
            .unwrap()
            .options
            .overprovisioning,
        0.2
    );

    for bad in [
        "/x:1GiB",
        "measured:",
        "measured:/x",
        "measured::1GiB",
        "measured:/x:0",
        "measured:/x:1XiB",
        "measured:/x:1GiB:handles=0",
        "measured:/x:1GiB:handles=300",
        "measured:/x:1GiB:op=-1",
        "measured:/x:1GiB:op=abc",
        "measured:/x:1GiB:colour=blue",
        "measured:/x:1GiB:handles",
        "measured:/x:1GiB:direct=maybe",
        "measured:handles=2",
    ] {
        let e = MeasuredSpec::parse(bad).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{bad}: {e}");
    }

    // Opening from a spec.
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("measured:{}:4MiB:handles=2", dir.path().join("s").display());
    let mut dev = MeasuredSpec::parse(&spec).unwrap().open().unwrap();
    assert_eq!(dev.geometry().capacity_bytes, 4 * MIB);
    assert_eq!(dev.geometry().placement_handles, 2);
    dev.write(0, &pattern(0, 1, 0), PlacementHandle(1)).unwrap();
    assert_eq!(dev.stats().handles[1].host_bytes_written, PAGE);
    assert_eq!(parse_size("4MiB").unwrap(), 4 * MIB);

    // A shape the model cannot have is an error, and creates no file.
    let tiny = dir.path().join("tiny");
    let e = MeasuredDevice::open(
        &tiny,
        MIB,
        MeasuredOptions {
            reclaim_unit_bytes: Some(MIB),
            ..MeasuredOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert!(!tiny.exists());
}

#[test]
fn stats_serialise_and_agree_with_the_fdp_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut dev = open(&dir, "d", 4 * MIB, MeasuredOptions::default());
    let v = serde_json::to_value(dev.stats()).unwrap();
    assert_eq!(v["dlwa"], serde_json::Value::Null);
    assert_eq!(v["handles"].as_array().unwrap().len(), 8);
    let pages = dev.geometry().capacity_bytes / PAGE;
    let buf = pattern(0, 16, 0);
    for lap in 0..3 {
        for p in (0..pages).step_by(16) {
            dev.write(p * PAGE, &buf, PlacementHandle(lap)).unwrap();
        }
    }
    let s = dev.stats();
    let json = serde_json::to_string(&s).unwrap();
    let back: MeasuredStats = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    for key in [
        "host_bytes_written",
        "media_bytes_written",
        "dlwa",
        "gc_victims",
        "gc_bytes_relocated",
        "media_bytes_erased",
        "model_metadata_bytes",
    ] {
        assert!(v.get(key).is_some(), "{key} in {json}");
    }
    assert!(v["handles"][2]["dlwa"].is_f64());
    let fdp = dev.fdp_stats().unwrap();
    assert_eq!(fdp.host_bytes_written, u128::from(s.host_bytes_written));
    assert_eq!(fdp.media_bytes_written, u128::from(s.media_bytes_written));
    assert_eq!(fdp.media_bytes_erased, u128::from(s.media_bytes_erased));
    assert_eq!(dev.ruh_status().unwrap().len(), 8);
    let cfg = dev.fdp_configurations().unwrap();
    assert_eq!(cfg.configs[0].reclaim_unit_bytes, s.reclaim_unit_bytes);
    assert!(s.gc_victims > 0, "three laps over the device reclaim units");
}

#[test]
fn the_model_stays_small_for_large_devices() {
    let dir = tempfile::tempdir().unwrap();
    for (gib, max_mib) in [(1u64, 3u64), (8, 22)] {
        // A sparse file: nothing is written.
        let dev = open(
            &dir,
            &format!("{gib}g"),
            gib << 30,
            MeasuredOptions::default(),
        );
        let s = dev.stats();
        eprintln!(
            "{gib} GiB: {} reclaim units of {} KiB, {:.2}% overprovisioning, model {:.1} MiB",
            s.reclaim_units,
            s.reclaim_unit_bytes >> 10,
            s.overprovisioning * 100.0,
            s.model_metadata_bytes as f64 / MIB as f64
        );
        assert_eq!(s.reclaim_unit_bytes, DEFAULT_RECLAIM_UNIT_BYTES);
        assert!(s.overprovisioning >= 0.07 && s.overprovisioning < 0.071);
        assert!(s.model_metadata_bytes <= max_mib * MIB, "{gib} GiB: {s:?}");
        // About 10.3 bytes per 4 KiB page at 7%.
        let per_page = s.model_metadata_bytes as f64 / (s.capacity_bytes / PAGE) as f64;
        assert!(per_page < 10.5, "{per_page} bytes per page");
    }
}
