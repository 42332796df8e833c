//! Stages from the stage contract on the switch: building every kind, refusing unknown
//! targets, reconciling (keep, resize, replace, remove), resizing a write-back stage under
//! writes without losing one, and placement handles on every engine write. No test waits
//! for time to pass: order comes from joins and counters.

mod common;
use common::ctx;

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use lachesis_fs::stage::space::testing::{sim, Writes};
use lachesis_fs::stage::{Devices, StageStats};
use lachesis_fs::{config, Switch, SwitchOptions};
use lachesis_switch::{LogConfig, Rule, StageConfig};

const MIB: u64 = 1 << 20;

/// A cache stage in the contract's shape.
fn cache(name: &str, engine: &str, size: u64, mode: &str, device: Option<&str>) -> StageConfig {
    serde_json::from_value(serde_json::json!({
        "kind": "cache", "name": name, "owner": null, "engine": engine, "size_bytes": size,
        "write_mode": mode, "eviction": "lru", "max_dirty_bytes": 64 * MIB,
        "device": device, "placement": [
            {"part": "loc", "handle": 2}, {"part": "klog", "handle": 3}, {"part": "kset", "handle": 4}],
        "next": null,
    }))
    .unwrap()
}

fn with_size(s: &StageConfig, size: u64) -> StageConfig {
    let StageConfig::Cache(c) = s else {
        unreachable!()
    };
    let mut c = c.clone();
    c.size_bytes = size;
    StageConfig::Cache(c)
}

/// One rule per (name, path prefix): IO under the prefix goes through the stage.
fn rules(routes: &[(&str, &str)]) -> Vec<Rule> {
    routes
        .iter()
        .enumerate()
        .map(|(i, (stage, prefix))| {
            serde_json::from_value(serde_json::json!({
                "name": format!("r{i}"), "priority": i + 1, "match": {"path_prefix": prefix},
                "detours": [{"what": "io", "to": {"kind": "stage", "target": stage}}],
            }))
            .unwrap()
        })
        .collect()
}

fn switch(state: &Path, rules: Vec<Rule>, stages: Vec<StageConfig>, devices: Devices) -> Switch {
    Switch::new(SwitchOptions {
        state_dir: state.to_path_buf(),
        rules,
        stages,
        devices,
        roots: Default::default(),
        remote: Default::default(),
    })
    .unwrap()
}

/// One simulated device of `mib` MiB (`flash0`) and its pool.
fn one_device(mib: u32) -> (Devices, std::sync::Arc<lachesis_fs::stage::space::Pool>) {
    let (dev, _) = sim(mib);
    let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
    let pool = devices.get(None).unwrap();
    (devices, pool)
}

/// Bytes of the pool's regions that stages hold.
fn used_bytes(pool: &lachesis_fs::stage::space::Pool) -> u64 {
    u64::from(pool.regions() - pool.free_regions()) * pool.region_bytes()
}

fn stats_of(sw: &Switch, name: &str) -> StageStats {
    sw.stage_stats()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stage {name}"))
}

/// A block's content for (writer, block, version): a checksum per write.
fn block(w: u64, b: u64, v: u64) -> Vec<u8> {
    let mut x = (w << 40) ^ (b << 20) ^ v ^ 0x9e37_79b9_7f4a_7c15;
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn the_fixture_stages_build_on_a_device_and_carry_io() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../api-schemas/fixtures/desired-state/valid-stages.json"
    ))
    .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["stages"][3]["dir"] = t.path().join("log").display().to_string().into();
    let file =
        config::parse(&serde_json::json!({"rules": v["rules"], "stages": v["stages"]}).to_string())
            .unwrap();
    // The agent's device: io_uring on a sparse 2 GiB file.
    let dev = lachesis_device::uring::UringDevice::open(
        t.path().join("flash0.img"),
        lachesis_device::uring::UringConfig {
            create_size: Some(2 << 30),
            single_issuer: false,
            fdp: lachesis_device::FdpMode::Fallback { handles: 8 },
            ..Default::default()
        },
    )
    .unwrap();
    let devices = Devices::new(vec![("flash0".into(), lachesis_cache::share(dev))]).unwrap();
    let sw = switch(
        &t.path().join("s"),
        file.rules,
        file.stages,
        devices.clone(),
    );
    let stats = sw.stage_stats();
    let names: Vec<&str> = stats.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["cache/alpha", "cache/shared-l2", "log/beta", "qos/alpha"]
    );
    for s in &stats {
        assert_eq!(s.installed_bytes, s.size_bytes, "{}", s.name);
    }
    let pool = devices.get(None).unwrap();
    assert_eq!(
        u64::from(pool.regions() - pool.free_regions()) * pool.region_bytes(),
        (256 + 1024) * MIB
    );
    // alpha's IO runs through qos/alpha, cache/alpha and its next, cache/shared-l2.
    let a = ctx(&b, Some("alpha"), "/a");
    for i in 0..64 {
        sw.write(&a, &block(1, i, 0), i * 4096).unwrap();
    }
    sw.sync(&a).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..64 {
        sw.read(&a, &mut buf, i * 4096).unwrap();
        assert_eq!(buf, block(1, i, 0));
    }
    let alpha = stats_of(&sw, "cache/alpha");
    assert_eq!((alpha.hits, alpha.misses), (64, 0), "{alpha:?}");
    assert_eq!(alpha.bytes_written, 64 * 4096);
    assert_eq!(alpha.writebacks, 64, "write-back: synced blocks went on");
    assert_eq!(stats_of(&sw, "cache/shared-l2").bytes_written, 64 * 4096);
    assert_eq!(stats_of(&sw, "qos/alpha").bytes_written, 64 * 4096);
    // beta's writes go to its log.
    let beta = ctx(&b, Some("beta"), "/b");
    sw.write(&beta, b"logged", 0).unwrap();
    assert_eq!(stats_of(&sw, "log/beta").bytes_written, 6);
    assert_eq!(std::fs::read(b.join("b")).unwrap(), vec![0u8; 6]);
    // The stats file keeps its shape: per stage its owner (as tenant) and counters.
    let st = sw.stats();
    let s0 = &st["stages"][0];
    assert_eq!(
        (s0["name"].as_str(), s0["tenant"].as_str()),
        (Some("cache/alpha"), Some("alpha"))
    );
    assert_eq!(s0["stats"]["hit_ratio"], 1.0);
}

#[test]
fn a_target_no_stage_declares_is_refused_and_the_old_table_stays() {
    let t = tempfile::tempdir().unwrap();
    let stages = vec![cache("cache/a", "dram", MIB, "through", None)];
    let sw = switch(
        &t.path().join("s"),
        rules(&[("cache/a", "/a")]),
        stages.clone(),
        Devices::default(),
    );
    let e = sw
        .set_rules(rules(&[("cache/a", "/a"), ("cache/zz", "/z")]), &stages)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rule \"r1\"") && e.contains("\"cache/zz\" is not declared"),
        "{e}"
    );
    assert!(e.contains("declared stages: cache/a"), "{e}");
    // A stage removed while a rule still names it: refused too.
    let e = sw
        .set_rules(rules(&[("cache/a", "/a")]), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"cache/a\" is not declared"), "{e}");
    // A flash stage without a device, a dangling next: refused, naming the stage.
    let e = sw
        .set_rules(
            rules(&[("cache/f", "/a")]),
            &[cache("cache/f", "loc", 4 * MIB, "through", None)],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache/f") && e.contains("--device"), "{e}");
    assert_eq!(sw.rules().len(), 1);
    assert_eq!(sw.stages(), stages);
    // A stage on the same route twice (directly or through next) is refused.
    let mut twice = rules(&[("cache/a", "/a")]);
    let again = twice[0].detours[0].clone();
    twice[0].detours.push(again);
    let e = sw.set_rules(twice, &stages).unwrap_err().to_string();
    assert!(e.contains("already on this route"), "{e}");
    // Switch::new refuses the same way.
    let e = Switch::new(SwitchOptions {
        state_dir: t.path().join("s2"),
        rules: rules(&[("cache/b", "/a")]),
        stages: stages.clone(),
        devices: Devices::default(),
        roots: Default::default(),
        remote: Default::default(),
    })
    .err()
    .unwrap();
    assert!(e.contains("\"cache/b\" is not declared"), "{e}");
}

#[test]
fn reconcile_keeps_resizes_replaces_and_writes_back_what_goes() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let (devices, pool) = one_device(24);
    let used = || used_bytes(&pool);
    let wb = cache("cache/wb", "dram", 4 * MIB, "back", None);
    let log = cache("cache/loc", "loc", 4 * MIB, "through", None);
    let routes = rules(&[("cache/wb", "/w"), ("cache/loc", "/l")]);
    let sw = switch(
        &t.path().join("s"),
        routes.clone(),
        vec![wb.clone(), log.clone()],
        devices.clone(),
    );
    assert_eq!(used(), 4 * MIB);
    let l = ctx(&b, None, "/l");
    std::fs::write(
        b.join("l"),
        (0..64).flat_map(|i| block(9, i, 0)).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let read_all = |sw: &Switch| {
        let mut buf = vec![0u8; 4096];
        for i in 0..64 {
            sw.read(&l, &mut buf, i * 4096).unwrap();
            assert_eq!(buf, block(9, i, 0));
        }
    };
    read_all(&sw);
    read_all(&sw);
    assert_eq!(
        (
            stats_of(&sw, "cache/loc").hits,
            stats_of(&sw, "cache/loc").misses
        ),
        (64, 64)
    );
    // Dirty data in the write-back stage.
    let w = ctx(&b, None, "/w");
    for i in 0..8 {
        sw.write(&w, &block(1, i, 1), i * 4096).unwrap();
    }
    assert_eq!(stats_of(&sw, "cache/wb").dirty_bytes, 8 * 4096);

    // Unchanged: the same instances (their counters go on).
    sw.set_rules(routes.clone(), &[wb.clone(), log.clone()])
        .unwrap();
    assert_eq!(stats_of(&sw, "cache/loc").hits, 64);
    assert_eq!(stats_of(&sw, "cache/wb").dirty_bytes, 8 * 4096);

    // Size alone: resized in place, contents and counters kept.
    sw.set_rules(routes.clone(), &[wb.clone(), with_size(&log, 8 * MIB)])
        .unwrap();
    let s = stats_of(&sw, "cache/loc");
    assert_eq!(
        (s.size_bytes, s.installed_bytes, s.hits),
        (8 * MIB, 8 * MIB, 64)
    );
    assert_eq!(used(), 8 * MIB);
    read_all(&sw);
    assert_eq!(
        stats_of(&sw, "cache/loc").hits,
        128,
        "the blocks stayed through the growth"
    );

    // A write-back stage that shrinks writes its dirty blocks back first.
    sw.set_rules(
        routes.clone(),
        &[with_size(&wb, MIB), with_size(&log, 8 * MIB)],
    )
    .unwrap();
    let s = stats_of(&sw, "cache/wb");
    assert_eq!(
        (s.dirty_bytes, s.writebacks, s.installed_bytes),
        (0, 8, MIB)
    );
    for i in 0..8 {
        use std::os::unix::fs::FileExt;
        std::fs::File::open(b.join("w"))
            .unwrap()
            .read_exact_at(&mut buf, i * 4096)
            .unwrap();
        assert_eq!(buf, block(1, i, 1), "block {i} reached the backing file");
    }

    // A growth the device cannot hold is refused before anything changes.
    let e = sw
        .set_rules(routes.clone(), &[wb.clone(), with_size(&log, 1 << 40)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cache/loc") && e.contains("device \"flash0\" is full"),
        "{e}"
    );
    assert_eq!(stats_of(&sw, "cache/loc").installed_bytes, 8 * MIB);
    assert_eq!(used(), 8 * MIB);

    // Another change (the engine): a new instance, counters from zero, old regions back.
    sw.set_rules(
        routes.clone(),
        &[
            with_size(&wb, MIB),
            cache("cache/loc", "kangaroo", 6 * MIB, "through", None),
        ],
    )
    .unwrap();
    let s = stats_of(&sw, "cache/loc");
    assert_eq!(
        (s.engine, s.hits, s.installed_bytes),
        (Some(lachesis_switch::CacheEngine::Kangaroo), 0, 6 * MIB)
    );
    assert_eq!(used(), 6 * MIB);
    read_all(&sw);

    // Removed with dirty data: written back before it goes; reads of its ranges go on to
    // where the data went.
    for i in 0..4 {
        sw.write(&w, &block(2, i, 2), i * 4096).unwrap();
    }
    assert_eq!(stats_of(&sw, "cache/wb").dirty_bytes, 4 * 4096);
    sw.set_rules(
        rules(&[("cache/loc", "/l")]),
        &[cache("cache/loc", "kangaroo", 6 * MIB, "through", None)],
    )
    .unwrap();
    assert_eq!(sw.stage_stats().len(), 1);
    assert_eq!(sw.stats()["reconcile_errors"], 0);
    for i in 0..8 {
        sw.read(&w, &mut buf, i * 4096).unwrap();
        let want = if i < 4 {
            block(2, i, 2)
        } else {
            block(1, i, 1)
        };
        assert_eq!(buf, want, "block {i}");
    }
    drop(sw);
    assert_eq!(pool.free_regions(), pool.regions(), "every region back");
}

/// A flash cache stage that a change replaces (here its placement handle moves, as when the
/// controller's broker renumbers handles for a new tenant) or removes gives its regions back
/// before its successor is built: on a nearly full device the two would not fit side by side.
/// A change that cannot fit even so is refused, and the stages in force come back.
#[test]
fn a_replaced_or_removed_stage_makes_room_for_its_successor_on_a_full_device() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let (devices, pool) = one_device(24);
    let used = || used_bytes(&pool);
    let big = cache("cache/a", "loc", 14 * MIB, "through", None);
    let small = cache("cache/b", "loc", 4 * MIB, "back", None);
    let routes = rules(&[("cache/a", "/a"), ("cache/b", "/b")]);
    let sw = switch(
        &t.path().join("s"),
        routes.clone(),
        vec![big.clone(), small.clone()],
        devices.clone(),
    );
    assert_eq!(used(), 18 * MIB);
    let wb = ctx(&b, None, "/b");
    for i in 0..4 {
        sw.write(&wb, &block(3, i, 1), i * 4096).unwrap();
    }

    // cache/a's placement moves: a new instance of 14 MiB while the old holds 14 of 24.
    let moved = |s: &StageConfig, handle: u16| {
        let StageConfig::Cache(c) = s else {
            unreachable!()
        };
        let mut c = c.clone();
        c.placement = vec![lachesis_switch::PartHandle {
            part: lachesis_switch::EnginePart::Loc,
            handle,
        }];
        StageConfig::Cache(c)
    };
    sw.set_rules(routes.clone(), &[moved(&big, 5), small.clone()])
        .unwrap();
    let s = stats_of(&sw, "cache/a");
    assert_eq!((s.size_bytes, s.installed_bytes), (14 * MIB, 14 * MIB));
    assert_eq!(used(), 18 * MIB);
    // The stage the change kept is untouched: its dirty blocks are still its own.
    assert_eq!(stats_of(&sw, "cache/b").dirty_bytes, 4 * 4096);

    // cache/b (write-back, dirty) goes and cache/c takes its place and more: b writes back.
    let c = cache("cache/c", "loc", 9 * MIB, "through", None);
    let with_c = rules(&[("cache/a", "/a"), ("cache/c", "/b")]);
    sw.set_rules(with_c.clone(), &[moved(&big, 5), moved(&c, 6)])
        .unwrap();
    assert_eq!(used(), 23 * MIB);
    let mut buf = vec![0u8; 4096];
    for i in 0..4 {
        use std::os::unix::fs::FileExt;
        std::fs::File::open(b.join("b"))
            .unwrap()
            .read_exact_at(&mut buf, i * 4096)
            .unwrap();
        assert_eq!(buf, block(3, i, 1), "block {i} reached the backing file");
    }

    // Too large even with cache/a emptied: refused, and what was in force comes back.
    let e = sw
        .set_rules(
            with_c.clone(),
            &[moved(&with_size(&big, 20 * MIB), 7), moved(&c, 6)],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache/a") && e.contains("is full"), "{e}");
    let s = stats_of(&sw, "cache/a");
    assert_eq!((s.size_bytes, s.installed_bytes), (14 * MIB, 14 * MIB));
    assert_eq!(used(), 23 * MIB);
    assert_eq!(sw.stats()["reconcile_errors"], 0);
}

/// Writers write versions of their own blocks through a write-back stage while the stage
/// is resized down and up; every acknowledged write must be what a read returns and what
/// the backing file holds after a sync (each writer keeps the content it expects).
fn resize_under_writes(engine: &str) {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let (dev, _) = sim(40);
    let devices = Devices::new(vec![("flash0".into(), dev)]).unwrap();
    let mut stage = cache("cache/wb", engine, 8 * MIB, "back", None);
    if let StageConfig::Cache(c) = &mut stage {
        // Small enough that writers also write back (over the limit) during resizes.
        c.max_dirty_bytes = 256 << 10;
    }
    let routes = rules(&[("cache/wb", "/")]);
    let sw = Arc::new(switch(
        &t.path().join("s"),
        routes.clone(),
        vec![stage.clone()],
        devices,
    ));
    const WRITERS: u64 = 3;
    const BLOCKS: u64 = 96;
    const WRITES: u64 = 400;
    let sizes = [
        2 * MIB,
        6 * MIB,
        MIB,
        12 * MIB,
        3 * MIB,
        2 * MIB,
        8 * MIB,
        MIB,
    ];
    let files: Vec<_> = (0..WRITERS)
        .map(|w| Arc::new(ctx(&b, None, &format!("/f{w}"))))
        .collect();
    for f in &files {
        // Every block inside the file, so a read of any of them is a whole block.
        f.backing.set_len(BLOCKS * 4096).unwrap();
    }
    // Acknowledged writes so far: the resizer paces itself on them, so resizes fall among
    // the writes.
    let acked = std::sync::atomic::AtomicU64::new(0);
    let expected: Vec<HashMap<u64, Vec<u8>>> = std::thread::scope(|s| {
        let writers: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(w, f)| {
                let (sw, f, acked) = (sw.clone(), f.clone(), &acked);
                s.spawn(move || {
                    let w = w as u64;
                    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
                    let mut x = w + 1;
                    for v in 1..=WRITES {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let blk = (x >> 33) % BLOCKS;
                        let data = block(w, blk, v);
                        if v % 8 == 0 {
                            // A partial write: its block goes on through the stage, after
                            // the block's dirty copy.
                            sw.write(&f, &data[100..300], blk * 4096 + 100).unwrap();
                            model.entry(blk).or_insert_with(|| vec![0; 4096])[100..300]
                                .copy_from_slice(&data[100..300]);
                        } else {
                            sw.write(&f, &data, blk * 4096).unwrap();
                            model.insert(blk, data);
                        }
                        acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    model
                })
            })
            .collect();
        let resizer = {
            let sw = sw.clone();
            let (routes, stage, acked) = (routes.clone(), stage.clone(), &acked);
            s.spawn(move || {
                let total = WRITERS * WRITES;
                for (i, size) in sizes.into_iter().enumerate() {
                    let at = total * (i as u64 + 1) / (sizes.len() as u64 + 2);
                    while acked.load(std::sync::atomic::Ordering::SeqCst) < at {
                        std::thread::yield_now();
                    }
                    sw.set_rules(routes.clone(), &[with_size(&stage, size)])
                        .unwrap();
                }
            })
        };
        resizer.join().unwrap();
        writers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let s = stats_of(&sw, "cache/wb");
    assert_eq!(s.size_bytes, MIB);
    assert!(s.writebacks > 0, "{s:?}");
    assert_eq!(sw.stats()["reconcile_errors"], 0);
    let mut buf = vec![0u8; 4096];
    for (w, model) in expected.iter().enumerate() {
        for (&blk, want) in model {
            sw.read(&files[w], &mut buf, blk * 4096).unwrap();
            assert!(
                buf == *want,
                "{engine}: writer {w} block {blk}: read crc {:08x}, acknowledged {:08x}",
                crc32c::crc32c(&buf),
                crc32c::crc32c(want)
            );
        }
        sw.sync(&files[w]).unwrap();
    }
    assert_eq!(stats_of(&sw, "cache/wb").dirty_bytes, 0);
    // On the backing files, with the stage out of the way.
    for (w, model) in expected.iter().enumerate() {
        let on_disk = std::fs::read(b.join(format!("f{w}"))).unwrap();
        for (&blk, want) in model {
            let got = &on_disk[(blk * 4096) as usize..][..4096];
            assert!(
                got == &want[..],
                "{engine}: writer {w} block {blk}: backing crc {:08x}, acknowledged {:08x}",
                crc32c::crc32c(got),
                crc32c::crc32c(want)
            );
        }
    }
}

#[test]
fn resizing_a_write_back_log_under_writes_loses_no_acknowledged_write() {
    resize_under_writes("loc");
}

#[test]
fn resizing_a_write_back_kangaroo_under_writes_loses_no_acknowledged_write() {
    resize_under_writes("kangaroo");
}

#[test]
fn resizing_a_write_back_dram_cache_under_writes_loses_no_acknowledged_write() {
    resize_under_writes("dram");
}

/// `n` simulated devices of `mib` MiB (`flash0`, ...) with their recorded writes.
fn sim_devices(
    n: usize,
    mib: u32,
) -> (Vec<(String, Writes, lachesis_cache::SharedDevice)>, Devices) {
    let devs: Vec<_> = (0..n)
        .map(|i| {
            let (d, w) = sim(mib);
            (format!("flash{i}"), w, d)
        })
        .collect();
    let devices = Devices::new(
        devs.iter()
            .map(|(n, _, d)| (n.clone(), d.clone()))
            .collect(),
    )
    .unwrap();
    (devs, devices)
}

#[test]
fn every_engine_write_carries_its_parts_handle() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    // One device per stage, so each device's writes are one stage's.
    let (devs, devices) = sim_devices(3, 16);
    let mut stages = vec![
        cache("cache/l", "loc", 4 * MIB, "through", Some("flash0")),
        cache("cache/k", "kangaroo", 4 * MIB, "through", Some("flash1")),
        cache("cache/h", "hybrid", 4 * MIB, "through", Some("flash2")),
    ];
    if let StageConfig::Cache(c) = &mut stages[2] {
        c.placement = serde_json::from_str(
            r#"[{"part": "loc", "handle": 5}, {"part": "klog", "handle": 6}, {"part": "kset", "handle": 7}]"#,
        )
        .unwrap();
    }
    let sw = switch(
        &t.path().join("s"),
        rules(&[("cache/l", "/l"), ("cache/k", "/k"), ("cache/h", "/h")]),
        stages,
        devices,
    );
    // 6 MiB through each: more than a log region, enough to flush KLog into KSet.
    for name in ["l", "k", "h"] {
        let f = ctx(&b, None, &format!("/{name}"));
        for i in 0..1536 {
            sw.write(&f, &block(0, i, 0), i * 4096).unwrap();
        }
    }
    let handles =
        |i: usize| -> BTreeSet<u16> { devs[i].1.lock().unwrap().iter().map(|w| w.2).collect() };
    assert_eq!(
        handles(0),
        BTreeSet::from([2]),
        "the log writes with its loc handle"
    );
    assert_eq!(
        handles(1),
        BTreeSet::from([3, 4]),
        "Kangaroo: KLog and KSet handles"
    );
    // The hybrid's blocks are above its small-object threshold: they go to its log.
    assert_eq!(handles(2), BTreeSet::from([5]), "the hybrid's log handle");
    for (name, writes, _) in &devs {
        let bytes: u64 = writes.lock().unwrap().iter().map(|w| w.1).sum();
        assert!(bytes >= MIB, "{name}: {bytes} bytes written");
    }
}

/// FairyWREN through the switch: a `fairywren` stage caches blocks (as four 1 KiB objects)
/// and reads them back, writing only with its FwLog and FwSets handles; a `hybrid-fairywren`
/// stage puts whole blocks in its log. Both install whole regions.
#[test]
fn fairywren_stages_cache_and_read_back_through_the_switch() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let (devs, devices) = sim_devices(2, 32);
    let mut stages = vec![
        cache("cache/fw", "fairywren", 16 * MIB, "through", Some("flash0")),
        cache(
            "cache/hfw",
            "hybrid-fairywren",
            20 * MIB,
            "through",
            Some("flash1"),
        ),
    ];
    for s in &mut stages {
        if let StageConfig::Cache(c) = s {
            c.placement = serde_json::from_str(
                r#"[{"part": "loc", "handle": 2}, {"part": "fwlog", "handle": 5},
                    {"part": "fwsets", "handle": 6}, {"part": "fwcold", "handle": 7}]"#,
            )
            .unwrap();
        }
    }
    let sw = switch(
        &t.path().join("s"),
        rules(&[("cache/fw", "/fw"), ("cache/hfw", "/hfw")]),
        stages,
        devices,
    );
    for name in ["fw", "hfw"] {
        let f = ctx(&b, None, &format!("/{name}"));
        for i in 0..1024 {
            sw.write(&f, &block(0, i, 0), i * 4096).unwrap();
        }
        let mut buf = vec![0u8; 4096];
        for i in 0..1024 {
            sw.read(&f, &mut buf, i * 4096).unwrap();
            assert_eq!(buf, block(0, i, 0), "{name}: block {i}");
        }
        let s = stats_of(&sw, &format!("cache/{name}"));
        assert_eq!(s.installed_bytes, s.size_bytes, "{name}");
        assert!(s.hits > 0, "{name}: {s:?}");
        assert_eq!(s.hits + s.misses, 1024, "{name}: {s:?}");
    }
    let handles =
        |i: usize| -> BTreeSet<u16> { devs[i].1.lock().unwrap().iter().map(|w| w.2).collect() };
    let fw = handles(0);
    assert!(
        fw.contains(&5) && fw.is_subset(&BTreeSet::from([5, 6, 7])),
        "FairyWREN writes with its FwLog and FwSets handles: {fw:?}"
    );
    assert_eq!(
        handles(1),
        BTreeSet::from([2]),
        "the hybrid's blocks go to its log"
    );
}

/// A log's reclaim rate changes when the change it comes in is made: a change refused for
/// another reason (a rule naming no stage) leaves the log holding its data, unreclaimed.
/// A qos stage in the contract's shape.
fn qos(name: &str, priority: &str) -> StageConfig {
    serde_json::from_value(serde_json::json!({
        "kind": "ratelimit", "name": name, "owner": null, "iops": null,
        "bytes_per_s": null, "min_bytes_per_s": null, "priority": priority,
    }))
    .unwrap()
}

#[test]
fn a_refused_change_leaves_a_qos_stages_class_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let routes = rules(&[("qos/q", "/q")]);
    let sw = switch(
        &t.path().join("s"),
        routes.clone(),
        vec![qos("qos/q", "low")],
        Devices::default(),
    );
    let key = lachesis_fs::qos::ClassKey::Stage("qos/q".into());
    let low = sw.qos().params(&key).expect("the class is in force");
    // The new priority rebuilds the stage; the change is refused at its rules.
    let e = sw
        .set_rules(
            rules(&[("qos/q", "/q"), ("cache/zz", "/z")]),
            &[qos("qos/q", "high")],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"cache/zz\" is not declared"), "{e}");
    assert_eq!(
        sw.qos().params(&key),
        Some(low),
        "refused: the class is as it was"
    );
    sw.set_rules(routes, &[qos("qos/q", "high")]).unwrap();
    let high = sw.qos().params(&key).unwrap();
    assert!(high.weight > low.weight, "made: {high:?} after {low:?}");
}

#[test]
fn a_refused_change_leaves_a_logs_reclaim_rate_as_it_was() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let dir = t.path().join("log").display().to_string();
    let held = StageConfig::Log(LogConfig::local("log/l", None, &dir));
    let mut reclaiming = LogConfig::local("log/l", None, &dir);
    reclaiming.reclaim_bytes_per_s = Some(1 << 30);
    let reclaiming = StageConfig::Log(reclaiming);
    let routes = rules(&[("log/l", "/l")]);
    let sw = switch(
        &t.path().join("s"),
        routes.clone(),
        vec![held.clone()],
        Devices::default(),
    );
    let l = ctx(&b, None, "/l");
    sw.write(&l, &block(3, 0, 0), 0).unwrap();
    let e = sw
        .set_rules(
            rules(&[("log/l", "/l"), ("cache/zz", "/z")]),
            std::slice::from_ref(&reclaiming),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"cache/zz\" is not declared"), "{e}");
    sw.reclaim(std::time::Duration::from_secs(1)).unwrap();
    assert_eq!(
        stats_of(&sw, "log/l").reclaimed_bytes,
        0,
        "refused: no reclaim"
    );
    // The log holds the bytes; the backing file has only their size.
    assert_eq!(std::fs::read(b.join("l")).unwrap(), vec![0u8; 4096]);
    // Made, the same rate reclaims the log into the file.
    sw.set_rules(routes, &[reclaiming]).unwrap();
    sw.reclaim(std::time::Duration::from_secs(1)).unwrap();
    assert_eq!(stats_of(&sw, "log/l").reclaimed_bytes, 4096);
    assert_eq!(std::fs::read(b.join("l")).unwrap(), block(3, 0, 0));
}
