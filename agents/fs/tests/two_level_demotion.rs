//! Two-level caches with demotion over real TCP on loopback: a switch's DRAM level-1 stage in
//! front of a remote endpoint, and the server level (`CachedStore`) of that endpoint's
//! `serve`. With an exclusive server level the two hold a cyclic scan that fits their sum
//! (Moirai's global LRU: level 1's evictions are demoted and read back from the server level);
//! an inclusive one of the same size holds what level 1 already has and the scan misses. A
//! write ends the lends, so a demotion of old bytes is refused and reads see the new ones.

mod common;
use common::{ctx, switch_of};

use std::net::TcpListener;
use std::sync::Arc;

use lachesis_fs::serve::cached_store::CachedStore;
use lachesis_fs::serve::server::{self, DirStore, Store};
use lachesis_fs::stage::{Devices, StageStats};
use lachesis_fs::switch::FileCtx;
use lachesis_fs::Switch;
use lachesis_switch::{CacheConfig, CacheEngine, Eviction, WriteMode};

const BLOCK: usize = 4096;
const BLOCKS: usize = 32;
const L1_BLOCKS: usize = 8;
/// Level 1 plus level 2 hold the file exactly (DRAM sizes count the 16-byte keys).
const L2_BLOCKS: usize = BLOCKS - L1_BLOCKS;

fn l2(exclusive: bool) -> CacheConfig {
    CacheConfig {
        name: "cache/t-l2".into(),
        owner: Some("t".into()),
        engine: CacheEngine::Dram,
        size_bytes: (L2_BLOCKS * (BLOCK + 16)) as u64,
        write_mode: WriteMode::Through,
        eviction: Eviction::Lru,
        max_dirty_bytes: 1 << 20,
        device: None,
        placement: vec![],
        next: None,
        serves: Some(vec!["store".into()]),
        exclusive,
    }
}

struct World {
    _t: tempfile::TempDir,
    level2: Arc<CachedStore>,
    sw: Switch,
    file: FileCtx,
}

fn world(exclusive: bool) -> World {
    let t = tempfile::tempdir().unwrap();
    let (b, root) = (t.path().join("b"), t.path().join("remote"));
    std::fs::create_dir_all(&b).unwrap();
    std::fs::create_dir_all(root.join("store")).unwrap();
    let content: Vec<u8> = (0..BLOCKS).flat_map(|i| vec![i as u8 + 1; BLOCK]).collect();
    std::fs::write(root.join("store/f"), &content).unwrap();
    std::fs::write(b.join("f"), vec![0u8; BLOCKS * BLOCK]).unwrap();
    let level2 = Arc::new(CachedStore::new(
        Arc::new(DirStore::new(&root).unwrap()),
        Devices::default(),
    ));
    level2.set_stages(&[l2(exclusive)]).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let store: Arc<dyn Store> = level2.clone();
    std::thread::spawn(move || server::serve(l, store, None));
    let rules = format!(
        r#"{{"rules": [{{"name": "r", "priority": 1, "match": {{"tenant": "t", "ops": ["read"]}},
             "detours": [{{"what": "io", "to": {{"kind": "stage", "target": "cache/t-l1"}}}},
                         {{"what": "io", "to": {{"kind": "file", "target": "tcp://{addr}/store"}}}}]}}],
            "stages": [{{"kind": "cache", "name": "cache/t-l1", "owner": "t", "engine": "dram",
                         "size_bytes": {}, "write_mode": "through", "eviction": "lru",
                         "max_dirty_bytes": 1048576, "device": null, "placement": [], "next": null}}]}}"#,
        L1_BLOCKS * (BLOCK + 16)
    );
    let sw = switch_of(&t.path().join("s"), &rules, Default::default()).unwrap();
    let file = ctx(&b, Some("t"), "/f");
    World {
        _t: t,
        level2,
        sw,
        file,
    }
}

fn stats(stats: Vec<StageStats>, name: &str) -> StageStats {
    stats.into_iter().find(|s| s.name == name).unwrap()
}

impl World {
    fn l1(&self) -> StageStats {
        stats(self.sw.stage_stats(), "cache/t-l1")
    }
    fn l2(&self) -> StageStats {
        stats(self.level2.stage_stats(), "cache/t-l2")
    }

    /// Reads every block in order, checking the bytes; after each read waits (a counted
    /// poll) until every demotion level 1 queued reached the server level, so what level 2
    /// holds does not depend on how fast the queue's thread ran.
    fn scan(&self) {
        let mut buf = vec![0u8; BLOCK];
        for i in 0..BLOCKS {
            assert_eq!(
                self.sw
                    .read(&self.file, &mut buf, (i * BLOCK) as u64)
                    .unwrap(),
                BLOCK
            );
            assert_eq!(buf, vec![i as u8 + 1; BLOCK], "block {i}");
            self.settle();
        }
    }

    /// Waits until the server level answered every demotion level 1 queued.
    fn settle(&self) {
        let queued = self.l1().demoted_blocks;
        for _ in 0..100_000 {
            let answered =
                self.l2().demoted_blocks + self.level2.store_counters().demotions_refused;
            if answered >= queued {
                return;
            }
            std::thread::yield_now();
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        panic!("demotions did not arrive: {queued} queued, {:?}", self.l2());
    }
}

#[test]
fn an_exclusive_server_level_holds_what_level_one_evicts_and_spares_the_store() {
    let (inclusive, exclusive) = (world(false), world(true));
    for w in [&inclusive, &exclusive] {
        w.scan();
    }
    let from_store = |w: &World| w.level2.store_counters().bytes_read;
    let first = (from_store(&inclusive), from_store(&exclusive));
    assert_eq!(first, ((BLOCKS * BLOCK) as u64, (BLOCKS * BLOCK) as u64));
    // Level 1 demoted what it evicted; the inclusive level got nothing (no lends).
    assert_eq!(exclusive.l1().demoted_blocks, (BLOCKS - L1_BLOCKS) as u64);
    assert_eq!(exclusive.l2().demoted_blocks, (BLOCKS - L1_BLOCKS) as u64);
    assert_eq!(
        (inclusive.l1().demoted_blocks, inclusive.l2().demoted_blocks),
        (0, 0)
    );
    for w in [&inclusive, &exclusive] {
        w.scan();
    }
    // The second scan: every block from one level or the other with demotion; the inclusive
    // level held the scan's last blocks, level 1 held them too, and the scan missed both.
    let second = (
        from_store(&inclusive) - first.0,
        from_store(&exclusive) - first.1,
    );
    assert_eq!(second, ((BLOCKS * BLOCK) as u64, 0));
    // Each block was evicted from level 1 (demoted) before the scan came back to it, so
    // every one of them was a hit on a demoted block.
    let l2 = exclusive.l2();
    assert_eq!((l2.hits, l2.demotion_hits), (BLOCKS as u64, BLOCKS as u64));
    assert_eq!(inclusive.l2().hits, 0);
}

#[test]
fn a_demotion_of_bytes_written_since_the_lend_is_refused() {
    let w = world(true);
    w.scan();
    // Level 1 holds the last L1_BLOCKS blocks, lent; another host writes the last one at
    // the server.
    let last = (BLOCKS - 1) * BLOCK;
    w.level2
        .write("store/f", last as u64, &vec![0xee; BLOCK])
        .unwrap();
    // Reading the first blocks again evicts level 1's oldest, the last block among them:
    // its demotion (of the old bytes) is refused, the others are taken.
    let (taken, refused) = (
        w.l2().demoted_blocks,
        w.level2.store_counters().demotions_refused,
    );
    let mut buf = vec![0u8; BLOCK];
    for i in 0..L1_BLOCKS {
        w.sw.read(&w.file, &mut buf, (i * BLOCK) as u64).unwrap();
        w.settle();
    }
    assert_eq!(w.l2().demoted_blocks - taken, (L1_BLOCKS - 1) as u64);
    assert_eq!(w.level2.store_counters().demotions_refused - refused, 1);
    // So the read of the last block sees the new bytes.
    w.sw.read(&w.file, &mut buf, last as u64).unwrap();
    assert_eq!(buf, vec![0xee; BLOCK]);
}
