//! The simulated SSD reproduces known DLWA results (tolerances, not timings).

use lachesis_device::dlwa as model;
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::workload::{measure, Mix, Region, Segregation, Stream, TwoStreams};
use lachesis_device::sim::{SimConfig, SimSsd};
use lachesis_device::{FdpLogs, PlacementHandle};

/// 1024 reclaim units of 256 pages (1 GiB of 4 KiB pages): enough units that the open and
/// reserved ones barely dent the spare space, so greedy GC lands on the analytic model.
fn ssd(op: f64, handles: Vec<RuhType>) -> SimSsd {
    SimSsd::new(SimConfig {
        pages_per_erase_block: 64,
        erase_blocks_per_ru: 4,
        rus_per_group: 1024,
        overprovisioning: op,
        handles,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn uniform_random_overwrites_match_the_papers_model() {
    for op in [0.07, 0.10, 0.20, 0.28] {
        let mut dev = ssd(op, vec![RuhType::InitiallyIsolated]);
        let n = dev.logical_pages();
        let whole = Region { start: 0, pages: n };
        let mut mix = Mix::new(
            vec![(
                1.0,
                Stream::Random {
                    region: whole,
                    handle: PlacementHandle(0),
                },
            )],
            42,
        )
        .unwrap();
        let before = dev.fdp_stats().unwrap();
        // Fill, three device-capacities of warm-up, four measured.
        let m = measure(&mut dev, &mut mix, 3 * n, 4 * n, |_| {}).unwrap();
        let want = model::dlwa_at_overprovisioning(op).unwrap();
        let err = m.dlwa / want - 1.0;
        assert!(
            err.abs() < 0.05,
            "op {op}: simulated {:.3} vs model {want:.3} ({:+.1}%)",
            m.dlwa,
            err * 100.0
        );
        // The FDP statistics agree with the page counters.
        let after = dev.fdp_stats().unwrap();
        let s = dev.stats();
        assert_eq!(
            after.host_bytes_written - before.host_bytes_written,
            u128::from(s.host_pages_written) * 4096
        );
        assert_eq!(
            after.media_bytes_written,
            u128::from(s.media_pages_written()) * 4096
        );
        assert_eq!(
            after.media_bytes_erased,
            u128::from(s.rus_erased) * 256 * 4096
        );
        dev.check_invariants().unwrap();
    }
}

#[test]
fn fifo_log_on_its_own_handle_has_no_write_amplification() {
    let mut dev = ssd(0.07, vec![RuhType::InitiallyIsolated; 2]);
    let n = dev.logical_pages();
    let log = Region { start: 0, pages: n };
    let mut mix = Mix::new(
        vec![(
            1.0,
            Stream::Log {
                region: log,
                handle: PlacementHandle(1),
                trim_pages: None,
                cursor: 0,
            },
        )],
        1,
    )
    .unwrap();
    let m = measure(&mut dev, &mut mix, 2 * n, 4 * n, |_| {}).unwrap();
    assert!(m.dlwa <= 1.01, "log DLWA {:.4}", m.dlwa);
    assert!(
        dev.stats().rus_erased > 0,
        "the log did wrap and reclaim units"
    );
}

fn two_streams(segregation: Segregation, handle_type: RuhType) -> f64 {
    let mut dev = ssd(0.10, vec![handle_type; 2]);
    let n = dev.logical_pages();
    let s = TwoStreams {
        random_space: 0.04,
        random_writes: 0.5,
        segregation,
    };
    let mut mix = s.mix(&dev, 7).unwrap();
    // Steady state needs the log to wrap a few times: one lap is 0.96·n / 0.5 host pages.
    let lap = (0.96 * n as f64 / 0.5) as u64;
    let m = measure(&mut dev, &mut mix, 3 * lap, 3 * lap, |_| {}).unwrap();
    dev.check_invariants().unwrap();
    m.dlwa
}

#[test]
fn small_random_stream_plus_log_needs_placement() {
    // The FDP paper's setup: 4% random-rewrite stream, 96% sequential log, 100% utilisation,
    // 10% overprovisioning, half of the host writes each (paper, on a drive: 3.5 and 1.03).
    let one = two_streams(Segregation::OneHandle, RuhType::InitiallyIsolated);
    assert!(one >= 2.5, "one handle: DLWA {one:.3}");
    let two = two_streams(Segregation::TwoHandles, RuhType::InitiallyIsolated);
    assert!(two <= 1.1, "two handles: DLWA {two:.3}");
    let pi = two_streams(Segregation::TwoHandles, RuhType::PersistentlyIsolated);
    assert!(pi <= 1.1, "two persistently isolated handles: DLWA {pi:.3}");
}
