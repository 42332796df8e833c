//! The engines on a real file through io_uring with O_DIRECT (placement falls back to the
//! default handle on a file): data round-trips, and bytes corrupted in the file under the
//! engine read as misses.

mod common;

use std::os::unix::fs::FileExt;

use common::{key, value};
use lachesis_cache::{share, Engine, Loc, LocConfig, SetAssoc, SetAssocConfig, Span};
use lachesis_device::uring::{UringConfig, UringDevice};
use lachesis_device::{FdpMode, PlacementHandle};

const MIB: u64 = 1 << 20;

#[test]
fn log_and_buckets_on_a_file_through_io_uring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.dat");
    let dev = UringDevice::open(
        &path,
        UringConfig {
            create_size: Some(32 * MIB),
            fdp: FdpMode::Fallback { handles: 2 },
            ..UringConfig::default()
        },
    )
    .unwrap();
    let dev = share(dev);
    let span = |offset, len| Span {
        device: dev.clone(),
        offset,
        len,
    };
    let mut c = LocConfig::new(span(0, 16 * MIB), PlacementHandle(0));
    c.region_bytes = MIB;
    let mut log = Loc::new(c).unwrap();
    let mut sa = SetAssoc::new(SetAssocConfig::new(
        span(16 * MIB, 4 * MIB),
        PlacementHandle(1),
    ))
    .unwrap();
    for k in 0..600 {
        assert!(log.set(&key(k), &value(k, 1, 5000)).unwrap());
        assert!(sa.set(&key(k), &value(k, 1, 200)).unwrap());
    }
    for k in 0..600 {
        assert_eq!(
            log.get(&key(k)).unwrap(),
            Some(value(k, 1, 5000)),
            "log key {k}"
        );
        assert_eq!(
            sa.get(&key(k)).unwrap(),
            Some(value(k, 1, 200)),
            "bucket key {k}"
        );
    }
    // Flip bytes in the file itself: the first log region and the whole bucket area.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    for at in (0..MIB)
        .step_by(512)
        .chain((16 * MIB..20 * MIB).step_by(256))
    {
        let mut b = [0u8; 1];
        file.read_exact_at(&mut b, at + 100).unwrap();
        file.write_all_at(&[b[0] ^ 0xff], at + 100).unwrap();
    }
    file.sync_all().unwrap();
    let (mut log_misses, mut sa_misses) = (0, 0);
    for k in 0..600 {
        match log.get(&key(k)).unwrap() {
            Some(v) => assert_eq!(v, value(k, 1, 5000), "log key {k}: wrong data"),
            None => log_misses += 1,
        }
        match sa.get(&key(k)).unwrap() {
            Some(v) => assert_eq!(v, value(k, 1, 200), "bucket key {k}: wrong data"),
            None => sa_misses += 1,
        }
    }
    // The first 1 MiB region held about 200 of the 5 KB objects.
    assert!(log_misses >= 150, "{log_misses} log misses");
    assert!(sa_misses >= 300, "{sa_misses} bucket misses");
    assert!(log.stats().corrupt_reads > 0 && sa.stats().corrupt_reads > 0);
}
