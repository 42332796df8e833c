//! Cache stages stay coherent with changes that reach a file by another way than the switch's
//! reads and writes (`src/switch/coherence.rs`): fallocate and truncates on the backing file,
//! changes while no switched handle had the file open, passthrough opens, unlinks of one name
//! of several. Each test reads through a stage that held the old bytes; before the coherence
//! module, the stage served them.

mod common;
use common::ctx;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use lachesis_fs::switch::Change;
use lachesis_fs::{config, Switch, SwitchOptions};

const BLOCK: usize = 4096;

/// `/c` through one DRAM cache stage in `mode`, or through a local endpoint (`mode` "endpoint").
fn switch(state: &Path, mode: &str, endpoint: &Path) -> Switch {
    let detour = match mode {
        "endpoint" => serde_json::json!({"what": "io", "to": {"kind": "file", "target": endpoint}}),
        _ => serde_json::json!({"what": "io", "to": {"kind": "stage", "target": "cache/c"}}),
    };
    let text = serde_json::json!({
        "rules": [{"name": "c", "priority": 1, "match": {"path_prefix": "/c"}, "detours": [detour]}],
        "stages": [{"kind": "cache", "name": "cache/c", "owner": null, "engine": "dram",
                    "size_bytes": 1 << 20, "write_mode": if mode == "endpoint" { "back" } else { mode },
                    "eviction": "lru", "max_dirty_bytes": 1 << 20, "device": null,
                    "placement": [], "next": null}],
    })
    .to_string();
    let f = config::parse(&text).unwrap();
    Switch::new(SwitchOptions {
        state_dir: state.to_path_buf(),
        rules: f.rules,
        stages: f.stages,
        devices: Default::default(),
        roots: lachesis_fs::confine::Roots::anywhere(),
        remote: Default::default(),
    })
    .unwrap()
}

fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (backing, state) = (t.path().join("b"), t.path().join("s"));
    std::fs::create_dir_all(backing.join("c")).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    (t, backing, state)
}

fn read(sw: &Switch, c: &lachesis_fs::switch::FileCtx, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xEEu8; len];
    let n = sw.read(c, &mut buf, off).unwrap();
    buf.truncate(n);
    buf
}

fn punch(f: &std::fs::File, off: u64, len: u64) -> std::io::Result<()> {
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: a valid open fd.
    match unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[test]
fn a_punched_hole_reads_as_zeros_through_every_write_mode() {
    for mode in ["back", "through", "around"] {
        let (_t, backing, state) = dirs();
        let sw = switch(&state, mode, Path::new("/nonexistent"));
        let c = ctx(&backing, None, "/c/f");
        sw.opened(c.id, &c.backing.metadata().unwrap());
        sw.write(&c, &vec![7u8; 4 * BLOCK], 0).unwrap();
        // Cached (and, write-back, dirty): a read is a hit.
        assert_eq!(read(&sw, &c, 0, 4 * BLOCK), vec![7u8; 4 * BLOCK], "{mode}");
        let backing_file = c.backing.clone();
        sw.alter(&c.path, c.id, Change::Bytes, || {
            punch(&backing_file, BLOCK as u64, 2 * BLOCK as u64)
        })
        .unwrap();
        let got = read(&sw, &c, 0, 4 * BLOCK);
        assert_eq!(&got[..BLOCK], &[7u8; BLOCK][..], "{mode}: before the hole");
        assert!(
            got[BLOCK..3 * BLOCK].iter().all(|b| *b == 0),
            "{mode}: the hole served old bytes"
        );
        assert_eq!(
            &got[3 * BLOCK..],
            &[7u8; BLOCK][..],
            "{mode}: after the hole"
        );
    }
}

#[test]
fn a_truncate_inside_a_dirty_block_keeps_the_bytes_before_the_new_end() {
    let (_t, backing, state) = dirs();
    let sw = switch(&state, "back", Path::new("/nonexistent"));
    let c = ctx(&backing, None, "/c/f");
    sw.opened(c.id, &c.backing.metadata().unwrap());
    sw.write(&c, &vec![9u8; 2 * BLOCK], 0).unwrap();
    let f = c.backing.clone();
    sw.truncate(&c.path, c.id, 5000, || f.set_len(5000))
        .unwrap();
    let got = read(&sw, &c, 0, 2 * BLOCK);
    assert_eq!(got.len(), 5000);
    assert!(
        got.iter().all(|b| *b == 9),
        "the dirty block holding the new end was dropped"
    );
}

#[test]
fn a_change_while_no_switched_handle_had_the_file_open_drops_the_cached_blocks() {
    let (_t, backing, state) = dirs();
    let sw = switch(&state, "through", Path::new("/nonexistent"));
    let c = ctx(&backing, None, "/c/f");
    sw.opened(c.id, &c.backing.metadata().unwrap());
    sw.write(&c, &vec![1u8; BLOCK], 0).unwrap();
    assert_eq!(read(&sw, &c, 0, BLOCK), vec![1u8; BLOCK]);
    sw.closed(&c).unwrap();
    sw.released(c.id, c.backing.metadata());
    // Unchanged: the next open keeps the cached block (a hit).
    sw.opened(c.id, &c.backing.metadata().unwrap());
    let hits = |sw: &Switch| sw.stage_stats()[0].hits;
    let before = hits(&sw);
    assert_eq!(read(&sw, &c, 0, BLOCK), vec![1u8; BLOCK]);
    assert_eq!(
        hits(&sw),
        before + 1,
        "an unchanged file lost its cached blocks"
    );
    sw.closed(&c).unwrap();
    sw.released(c.id, c.backing.metadata());
    // Written behind the switch's back (a passthrough open, another program).
    std::fs::OpenOptions::new()
        .write(true)
        .open(backing.join("c/f"))
        .unwrap()
        .write_all_at(&[2u8; BLOCK], 0)
        .unwrap();
    sw.opened(c.id, &c.backing.metadata().unwrap());
    assert_eq!(
        read(&sw, &c, 0, BLOCK),
        vec![2u8; BLOCK],
        "served the block the file no longer holds"
    );
}

#[test]
fn a_passthrough_open_gets_the_bytes_a_write_back_stage_held() {
    let (_t, backing, state) = dirs();
    let sw = switch(&state, "back", Path::new("/nonexistent"));
    let c = ctx(&backing, None, "/c/f");
    sw.opened(c.id, &c.backing.metadata().unwrap());
    sw.write(&c, &vec![3u8; BLOCK], 0).unwrap();
    // Another name of the same file, opened by the kernel: it reads the backing file.
    sw.opening_passthrough("/other-name", c.id).unwrap();
    let mut buf = vec![0u8; BLOCK];
    c.backing.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, vec![3u8; BLOCK]);
}

#[test]
fn removing_one_name_of_a_file_keeps_the_data_the_other_name_reads() {
    let (_t, backing, state) = dirs();
    let sw = switch(&state, "back", Path::new("/nonexistent"));
    let c = ctx(&backing, None, "/c/f");
    sw.opened(c.id, &c.backing.metadata().unwrap());
    sw.write(&c, &vec![4u8; BLOCK], 0).unwrap();
    std::fs::hard_link(backing.join("c/f"), backing.join("c/g")).unwrap();
    std::fs::remove_file(backing.join("c/f")).unwrap();
    sw.unlinked("/c/f", c.id, false).unwrap();
    let g = ctx(&backing, None, "/c/g");
    assert_eq!(g.id, c.id);
    assert_eq!(
        read(&sw, &g, 0, BLOCK),
        vec![4u8; BLOCK],
        "the other name lost the written bytes"
    );
}

#[test]
fn a_change_of_bytes_on_a_file_whose_data_lives_at_an_endpoint_is_refused() {
    let (t, backing, state) = dirs();
    let endpoint = t.path().join("e");
    std::fs::create_dir_all(&endpoint).unwrap();
    let sw = switch(&state, "endpoint", &endpoint);
    let c = ctx(&backing, None, "/c/f");
    sw.write(&c, &vec![5u8; BLOCK], 0).unwrap();
    let mut ran = false;
    let e = sw
        .alter(&c.path, c.id, Change::Bytes, || {
            ran = true;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
    assert!(!ran, "the change ran on the backing file");
    assert!(!sw.can_link(&c.path, c.id));
    assert_eq!(read(&sw, &c, 0, BLOCK), vec![5u8; BLOCK]);
}
