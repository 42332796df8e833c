//! The planner and dispatcher on real files: foreground reads count, the dispatcher reads
//! the rest (checksums match the files), overlap counts once, pacing follows the deadline.

use std::path::Path;

use lachesis_declared::coverage::{digest_of, BLOCK};
use lachesis_declared::dispatcher::run_work;
use lachesis_declared::message::{DeclaredIo, JobState};
use lachesis_declared::{Mount, Planner};
use time::{Duration, OffsetDateTime};

const MIB: u64 = 1 << 20;

fn data(n: u64, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn setup(files: &[(&str, u64)]) -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("backing/d")).unwrap();
    std::fs::create_dir_all(dir.path().join("mnt")).unwrap();
    let mut out = Vec::new();
    for (i, (name, n)) in files.iter().enumerate() {
        let d = data(*n, i as u8);
        std::fs::write(dir.path().join("backing").join(name), &d).unwrap();
        out.push(d);
    }
    (dir, out)
}

fn planner(dir: &Path, budget: u64) -> Planner {
    Planner::new(
        vec![Mount {
            backing: dir.join("backing"),
            mountpoint: dir.join("mnt"),
        }],
        budget,
    )
}

fn msg(version: u64, jobs: serde_json::Value) -> DeclaredIo {
    serde_json::from_value(serde_json::json!({
        "schema": "lachesis.declared-io/v1", "host_id": "h1", "version": version, "jobs": jobs,
    }))
    .unwrap()
}

fn deadline(now: OffsetDateTime, secs: i64) -> String {
    (now + Duration::seconds(secs))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// Runs the dispatcher's quanta (each `dt` seconds long) until nothing is planned; returns
/// the bytes it read.
fn dispatch(p: &Planner, now: OffsetDateTime, dt: f64, quanta: usize) -> u64 {
    let mut read = 0;
    for _ in 0..quanta {
        for w in p.plan(dt, now) {
            read += w.claim.len;
            run_work(p, &w);
        }
    }
    read
}

#[test]
fn foreground_reads_count_and_the_dispatcher_reads_the_rest_with_matching_checksums() {
    let (dir, files) = setup(&[("d/a", 3 * MIB + 123), ("d/b", 2 * MIB)]);
    let mnt = dir.path().join("mnt");
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), 64 * MIB);
    p.apply(&msg(1, serde_json::json!([{
        "id": "scrub-1", "tenant": "t1", "deadline": deadline(now, 3600), "pace": "budget",
        "files": [{"path": format!("{}/d/a", mnt.display())},
                  {"path": format!("{}/d/b", mnt.display()), "offset": 1000, "length": MIB}],
    }])), now);
    assert!(p.watches(0, "/d/a") && p.watches(0, "/d/b") && !p.watches(0, "/d/c"));
    // The foreground reads all of b's range and a's first MiB, in unaligned pieces.
    for (path, d, from, to) in [
        ("/d/b", &files[1], 0u64, 2 * MIB),
        ("/d/a", &files[0], 0, MIB),
    ] {
        let mut off = from;
        while off < to {
            let n = (40_000).min(to - off);
            p.observe(0, path, off, &d[off as usize..(off + n) as usize]);
            off += n;
        }
    }
    let r = &p.reports()[0];
    assert_eq!(r.state, JobState::Running);
    assert_eq!(r.foreground_bytes, 2 * MIB, "b's range and a's first MiB");
    let read = dispatch(&p, now, 1.0, 10);
    let r = &p.reports()[0];
    assert_eq!(r.state, JobState::Done, "{r:?}");
    assert_eq!(r.bytes_declared, 3 * MIB + 123 + MIB);
    assert_eq!(r.dispatched_bytes, read);
    assert_eq!(r.dispatched_bytes + r.foreground_bytes, r.bytes_declared);
    assert_eq!(r.dispatched_bytes, 2 * MIB + 123);
    let digests = r.files.as_ref().unwrap();
    assert_eq!(digests[0].crc32, digest_of(0, &files[0]));
    assert_eq!(
        digests[1].crc32,
        digest_of(1000, &files[1][1000..1000 + MIB as usize])
    );
    assert_eq!((digests[1].offset, digests[1].length), (1000, MIB));
    // Done: reads no longer pass through the planner.
    assert!(!p.watches(0, "/d/a"));
}

#[test]
fn a_block_read_for_one_job_counts_for_another_declaring_it() {
    let (dir, _files) = setup(&[("d/a", 2 * MIB)]);
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), 64 * MIB);
    let path = format!("{}/backing/d/a", dir.path().display());
    p.apply(&msg(1, serde_json::json!([
        {"id": "scrub", "tenant": "t1", "deadline": deadline(now, 60), "pace": "budget", "files": [{"path": path}]},
        {"id": "backup", "tenant": "t1", "deadline": deadline(now, 7200), "paused": true, "files": [{"path": path}]},
    ])), now);
    let read = dispatch(&p, now, 1.0, 5);
    assert_eq!(read, 2 * MIB, "each block is read once");
    let reports = p.reports();
    let backup = reports.iter().find(|r| r.id == "backup").unwrap();
    let scrub = reports.iter().find(|r| r.id == "scrub").unwrap();
    assert_eq!(
        (scrub.state, scrub.dispatched_bytes),
        (JobState::Done, 2 * MIB)
    );
    assert_eq!(
        (backup.state, backup.shared_bytes, backup.dispatched_bytes),
        (JobState::Done, 2 * MIB, 0)
    );
    assert_eq!(
        backup.files.as_ref().unwrap()[0].crc32,
        scrub.files.as_ref().unwrap()[0].crc32
    );
}

#[test]
fn deadline_pacing_reads_what_is_left_over_the_time_left_and_paused_jobs_read_nothing() {
    let (dir, _files) = setup(&[("d/a", 64 * MIB)]);
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), 1024 * MIB);
    let path = format!("{}/mnt/d/a", dir.path().display());
    // 64 MiB by 1000 s, aiming at 900 s: 1/900 of it per second.
    p.apply(&msg(1, serde_json::json!([
        {"id": "scrub", "tenant": "t1", "deadline": deadline(now, 1000), "files": [{"path": path}]},
    ])), now);
    let read = dispatch(&p, now, 1.0, 9);
    let per_s = 64.0 * MIB as f64 / 900.0;
    assert!(
        (read as f64) < 9.0 * per_s + BLOCK as f64 && (read as f64) >= 9.0 * per_s - BLOCK as f64,
        "{read}"
    );
    // Paused: nothing; the job keeps its progress across messages.
    p.apply(&msg(2, serde_json::json!([
        {"id": "scrub", "tenant": "t1", "deadline": deadline(now, 1000), "paused": true, "files": [{"path": path}]},
    ])), now);
    assert_eq!(dispatch(&p, now, 1.0, 5), 0);
    assert_eq!(p.reports()[0].state, JobState::Paused);
    assert_eq!(p.reports()[0].dispatched_bytes, read);
    // Past its aim a job reads at the budget; its own rate caps it.
    p.apply(&msg(3, serde_json::json!([
        {"id": "scrub", "tenant": "t1", "deadline": deadline(now, 1000), "rate_bytes_per_s": 4 * MIB, "files": [{"path": path}]},
    ])), now + Duration::seconds(950));
    let late = now + Duration::seconds(950);
    let quantum = dispatch(&p, late, 1.0, 1);
    assert!(
        (4 * MIB - BLOCK..=4 * MIB + BLOCK).contains(&quantum),
        "{quantum}"
    );
    // An older message changes nothing.
    assert!(!p.apply(&msg(2, serde_json::json!([])), now));
    assert_eq!(p.reports().len(), 1);
}

#[test]
fn the_budget_caps_all_jobs_and_the_earliest_deadline_goes_first() {
    let (dir, _files) = setup(&[("d/a", 8 * MIB), ("d/b", 8 * MIB)]);
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), MIB);
    let b = |n: &str| format!("{}/mnt/d/{n}", dir.path().display());
    p.apply(&msg(1, serde_json::json!([
        {"id": "late", "tenant": "t1", "deadline": deadline(now, 500), "pace": "budget", "files": [{"path": b("a")}]},
        {"id": "early", "tenant": "t1", "deadline": deadline(now, 100), "pace": "budget", "files": [{"path": b("b")}]},
    ])), now);
    let read = dispatch(&p, now, 1.0, 3);
    assert!(read <= 3 * MIB + BLOCK, "{read}");
    let reports = p.reports();
    let early = reports.iter().find(|r| r.id == "early").unwrap();
    let late = reports.iter().find(|r| r.id == "late").unwrap();
    assert_eq!((early.dispatched_bytes, late.dispatched_bytes), (read, 0));
}

#[test]
fn a_job_whose_files_are_not_under_a_mount_or_too_short_fails_saying_why() {
    let (dir, _files) = setup(&[("d/a", MIB)]);
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), MIB);
    p.apply(&msg(1, serde_json::json!([
        {"id": "elsewhere", "tenant": "t1", "deadline": deadline(now, 100), "files": [{"path": "/etc/passwd"}]},
        {"id": "missing", "tenant": "t1", "deadline": deadline(now, 100), "files": [{"path": format!("{}/mnt/d/zz", dir.path().display())}]},
        {"id": "short", "tenant": "t1", "deadline": deadline(now, 100), "files": [{"path": format!("{}/mnt/d/a", dir.path().display()), "offset": 10, "length": MIB}]},
    ])), now);
    let reports = p.reports();
    for r in &reports {
        assert_eq!(r.state, JobState::Failed, "{r:?}");
    }
    let why = |id: &str| {
        reports
            .iter()
            .find(|r| r.id == id)
            .unwrap()
            .error
            .clone()
            .unwrap()
    };
    assert!(why("elsewhere").contains("under no mount"));
    assert!(why("missing").contains("No such file"));
    assert!(why("short").contains("ends past the file's"));
    assert_eq!(dispatch(&p, now, 1.0, 2), 0);
}

#[test]
fn bad_messages_are_refused_naming_the_field() {
    let bad = [
        (
            serde_json::json!({"schema": "lachesis.declared-io/v2", "host_id": "h", "version": 1, "jobs": []}),
            "schema",
        ),
        (
            serde_json::json!({"schema": "lachesis.declared-io/v1", "host_id": "h", "version": 0, "jobs": []}),
            "version",
        ),
        (
            serde_json::json!({"schema": "lachesis.declared-io/v1", "host_id": "h", "version": 1, "jobs": [
            {"id": "j", "tenant": "t", "deadline": "2030-01-01T00:00:00Z", "files": []}]}),
            "files",
        ),
        (
            serde_json::json!({"schema": "lachesis.declared-io/v1", "host_id": "h", "version": 1, "jobs": [
            {"id": "j", "tenant": "t", "deadline": "tomorrow", "files": [{"path": "/a"}]}]}),
            "deadline",
        ),
        (
            serde_json::json!({"schema": "lachesis.declared-io/v1", "host_id": "h", "version": 1, "jobs": [
            {"id": "j", "tenant": "t", "deadline": "2030-01-01T00:00:00Z", "files": [{"path": "/a/../b"}]}]}),
            "path",
        ),
    ];
    for (v, field) in bad {
        let e = serde_json::from_value::<DeclaredIo>(v)
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{e}");
    }
}

#[test]
fn a_directory_stands_for_every_file_under_it() {
    let (dir, files) = setup(&[("d/a", MIB), ("d/b", 1000)]);
    std::fs::create_dir_all(dir.path().join("backing/d/sub")).unwrap();
    std::fs::write(dir.path().join("backing/d/sub/c"), b"hello").unwrap();
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), 64 * MIB);
    let d = format!("{}/mnt/d", dir.path().display());
    p.apply(&msg(1, serde_json::json!([
        {"id": "scrub", "tenant": "t1", "deadline": deadline(now, 100), "pace": "budget", "files": [{"path": d}]},
    ])), now);
    assert!(p.watches(0, "/d/sub/c"));
    dispatch(&p, now, 1.0, 3);
    let r = &p.reports()[0];
    assert_eq!((r.state, r.bytes_declared), (JobState::Done, MIB + 1005));
    let digests: Vec<(String, u32)> = r
        .files
        .clone()
        .unwrap()
        .into_iter()
        .map(|f| (f.path, f.crc32))
        .collect();
    assert_eq!(
        digests,
        vec![
            (format!("{d}/a"), digest_of(0, &files[0])),
            (format!("{d}/b"), digest_of(0, &files[1])),
            (format!("{d}/sub/c"), digest_of(0, b"hello")),
        ]
    );
}

#[test]
fn a_path_in_the_mounts_namespace_is_found_there_and_the_agents_state_dir_is_never_scrubbed() {
    let (dir, files) = setup(&[("d/a", 1000)]);
    std::fs::create_dir_all(dir.path().join("backing/.lachesis-fs")).unwrap();
    std::fs::write(dir.path().join("backing/.lachesis-fs/journal"), b"state").unwrap();
    let now = OffsetDateTime::now_utc();
    let p = planner(dir.path(), 64 * MIB);
    p.apply(&msg(1, serde_json::json!([
        {"id": "ns", "tenant": "t1", "deadline": deadline(now, 100), "pace": "budget", "files": [{"path": "/d"}]},
        {"id": "all", "tenant": "t1", "deadline": deadline(now, 100), "pace": "budget",
         "files": [{"path": format!("{}/mnt", dir.path().display())}]},
        {"id": "none", "tenant": "t1", "deadline": deadline(now, 100), "files": [{"path": "/nowhere"}]},
    ])), now);
    dispatch(&p, now, 1.0, 3);
    let reports = p.reports();
    let by = |id: &str| reports.iter().find(|r| r.id == id).unwrap().clone();
    let ns = by("ns");
    assert_eq!(ns.state, JobState::Done);
    assert_eq!(ns.files.unwrap()[0].crc32, digest_of(0, &files[0]));
    let all = by("all");
    assert_eq!(
        (all.state, all.bytes_declared),
        (JobState::Done, 1000),
        "the state dir is skipped"
    );
    assert_eq!(by("none").state, JobState::Failed);
}
