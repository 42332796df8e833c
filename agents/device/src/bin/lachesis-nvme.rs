//! lachesis-nvme: drives an NVMe namespace through the passthrough backend (`/dev/ngXnY`,
//! io_uring `uring_cmd`) and prints what the project decodes, as JSON on stdout, so that it can
//! be checked against `nvme-cli` on the same device (e2e/guest does, in a QEMU guest).
//!
//! Usage:
//!   lachesis-nvme logs DEV
//!       geometry, FDP configurations (0x20), RUH usage (0x21), FDP statistics (0x22),
//!       host and controller FDP events (0x23) and RUH status (IO Management Receive)
//!   lachesis-nvme exercise DEV --blocks H:N[,H:N...] [--trim H]
//!       writes N blocks of a pattern on placement handle H (each handle its own range,
//!       one after another from LBA 0), reads every range back and compares, then deallocates
//!       the range of handle --trim; prints the bytes written per handle and what was checked
//!   lachesis-nvme iops DEV --rw randread|randwrite [--bs BYTES] [--qd N] [--ios N] [--handle H]
//!       random IO in batches of --qd commands over the first GiB (or the namespace), as fio's
//!       io_uring_cmd engine does it; prints ios, seconds and IOPS
//! Bad input: a message on stderr and exit 2; a device error: exit 1.

use std::process::ExitCode;
use std::time::Instant;

use lachesis_device::nvme::logpage::{FdpEvent, FdpEventType, RuhType};
use lachesis_device::nvme::{NvmeConfig, NvmePassthru};
use lachesis_device::{BlockDevice, FdpLogs, IoRequest, PlacementHandle};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};

enum Fail {
    Usage(String),
    Device(String),
}

impl From<lachesis_device::Error> for Fail {
    fn from(e: lachesis_device::Error) -> Self {
        Fail::Device(e.to_string())
    }
}

fn usage(msg: impl Into<String>) -> Fail {
    Fail::Usage(msg.into())
}

fn event_json(e: &FdpEvent) -> Value {
    let kind = match e.kind {
        FdpEventType::RuNotFullyWritten => "ru_not_fully_written".to_string(),
        FdpEventType::RuTimeLimitExceeded => "ru_time_limit_exceeded".into(),
        FdpEventType::ControllerResetModifiedRuh => "controller_reset_modified_ruh".into(),
        FdpEventType::InvalidPlacementId => "invalid_placement_id".into(),
        FdpEventType::MediaReallocated => "media_reallocated".into(),
        FdpEventType::ImplicitlyModifiedRuh => "implicitly_modified_ruh".into(),
        FdpEventType::Other(x) => format!("other_{x:#04x}"),
    };
    json!({
        "kind": kind,
        "placement_id": e.placement_id,
        "nsid": e.nsid,
        "reclaim_group": e.location.map(|l| l.0),
        "ruh_id": e.location.map(|l| l.1),
        "timestamp_ms": e.timestamp_ms,
        "lbas_moved": e.reallocated.map(|r| r.lbas_moved),
    })
}

fn logs(dev: &mut NvmePassthru) -> Result<Value, Fail> {
    let g = dev.geometry().clone();
    let configs = dev.fdp_configurations()?;
    let stats = dev.fdp_stats()?;
    Ok(json!({
        "nsid": dev.nsid(),
        "geometry": {
            "capacity_bytes": g.capacity_bytes,
            "block_size": g.block_size,
            "placement_handles": g.placement_handles,
            "reclaim_unit_bytes": g.reclaim_unit_bytes,
            "reclaim_groups": g.reclaim_groups,
        },
        "configurations": configs.configs.iter().map(|c| json!({
            "rgif": c.rgif,
            "volatile_write_cache": c.volatile_write_cache,
            "valid": c.valid,
            "reclaim_groups": c.reclaim_groups,
            "max_placement_ids": c.max_placement_ids,
            "namespaces": c.namespaces,
            "reclaim_unit_bytes": c.reclaim_unit_bytes,
            "ru_time_limit_s": c.ru_time_limit_s,
            "ruh_types": c.ruh_types.iter().map(|t| match t {
                RuhType::InitiallyIsolated => "initially_isolated".to_string(),
                RuhType::PersistentlyIsolated => "persistently_isolated".into(),
                RuhType::Other(x) => format!("other_{x}"),
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "ruh_usage": dev.ruh_usage()?.iter().map(|u| json!({
            "host_specified": u.host_specified,
            "controller_specified": u.controller_specified,
        })).collect::<Vec<_>>(),
        "statistics": {
            "host_bytes_written": stats.host_bytes_written,
            "media_bytes_written": stats.media_bytes_written,
            "media_bytes_erased": stats.media_bytes_erased,
        },
        "ruh_status": dev.ruh_status()?.iter().map(|s| json!({
            "placement_id": s.placement_id,
            "ruh_id": s.ruh_id,
            "time_remaining_s": s.time_remaining_s,
            "available_media_writes": s.available_media_writes,
        })).collect::<Vec<_>>(),
        "host_events": dev.fdp_host_events()?.iter().map(event_json).collect::<Vec<_>>(),
        "controller_events": dev.fdp_events()?.iter().map(event_json).collect::<Vec<_>>(),
    }))
}

/// The byte at `i` of handle `h`'s range: differs between handles and along the range, so a
/// write landing in the wrong place or on the wrong range reads back wrong.
fn pattern(h: u16, i: usize) -> u8 {
    (i as u64 / 512 * 31 + u64::from(h) * 97 + i as u64) as u8
}

fn exercise(dev: &mut NvmePassthru, plan: &[(u16, u64)], trim: Option<u16>) -> Result<Value, Fail> {
    let bs = u64::from(dev.geometry().block_size);
    let mut ranges = Vec::new();
    let mut lba = 0u64;
    for &(h, n) in plan {
        dev.geometry().check_handle(PlacementHandle(h))?;
        ranges.push((h, lba * bs, n * bs));
        lba += n;
    }
    if lba * bs > dev.geometry().capacity_bytes {
        return Err(usage(format!(
            "--blocks: {lba} blocks do not fit the namespace's {} bytes",
            dev.geometry().capacity_bytes
        )));
    }
    let chunk = dev.geometry().max_io_bytes as u64;
    for &(h, off, len) in &ranges {
        let mut done = 0;
        while done < len {
            let n = chunk.min(len - done);
            let buf: Vec<u8> = (0..n as usize)
                .map(|i| pattern(h, done as usize + i))
                .collect();
            dev.write(off + done, &buf, PlacementHandle(h))?;
            done += n;
        }
    }
    dev.flush()?;
    let mut mismatches = 0u64;
    for &(h, off, len) in &ranges {
        let mut done = 0;
        while done < len {
            let n = chunk.min(len - done);
            let mut buf = vec![0u8; n as usize];
            dev.read(off + done, &mut buf)?;
            mismatches += buf
                .iter()
                .enumerate()
                .filter(|(i, b)| **b != pattern(h, done as usize + i))
                .count() as u64;
            done += n;
        }
    }
    let mut trimmed = None;
    if let Some(t) = trim {
        let &(_, off, len) = ranges
            .iter()
            .find(|r| r.0 == t)
            .ok_or_else(|| usage(format!("--trim {t}: no --blocks range for handle {t}")))?;
        dev.trim(off, len)?;
        let mut buf = vec![0u8; chunk.min(len) as usize];
        dev.read(off, &mut buf)?;
        trimmed = Some(json!({
            "handle": t, "offset": off, "bytes": len,
            "reads_zero": buf.iter().all(|b| *b == 0),
        }));
    }
    Ok(json!({
        "block_size": bs,
        "written": ranges.iter().map(|&(h, off, len)| json!({"handle": h, "offset": off, "bytes": len})).collect::<Vec<_>>(),
        "mismatched_bytes": mismatches,
        "trimmed": trimmed,
    }))
}

fn iops(
    dev: &mut NvmePassthru,
    write: bool,
    bs: usize,
    qd: usize,
    ios: u64,
    handle: u16,
) -> Result<Value, Fail> {
    let g = dev.geometry().clone();
    if bs == 0
        || !(bs as u64).is_multiple_of(u64::from(g.block_size))
        || bs > g.max_io_bytes as usize
    {
        return Err(usage(format!(
            "--bs {bs}: must be a multiple of {} up to {}",
            g.block_size, g.max_io_bytes
        )));
    }
    g.check_handle(PlacementHandle(handle))?;
    let span = g.capacity_bytes.min(1 << 30) / bs as u64;
    let mut rng = SmallRng::seed_from_u64(7);
    let mut bufs: Vec<Vec<u8>> = (0..qd).map(|i| vec![i as u8; bs]).collect();
    let start = Instant::now();
    let mut done = 0u64;
    while done < ios {
        let n = (qd as u64).min(ios - done) as usize;
        let offsets: Vec<u64> = (0..n)
            .map(|_| rng.random_range(0..span) * bs as u64)
            .collect();
        let mut batch: Vec<IoRequest<'_>> = bufs
            .iter_mut()
            .zip(&offsets)
            .map(|(buf, &offset)| {
                if write {
                    IoRequest::Write {
                        offset,
                        buf: &buf[..],
                        handle: PlacementHandle(handle),
                    }
                } else {
                    IoRequest::Read {
                        offset,
                        buf: &mut buf[..],
                    }
                }
            })
            .collect();
        dev.submit_batch(&mut batch)?;
        done += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(
        json!({"rw": if write {"randwrite"} else {"randread"}, "bs": bs, "qd": qd,
              "ios": done, "seconds": secs, "iops": done as f64 / secs}),
    )
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn num<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Fail> {
    match flag(args, name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| usage(format!("{name} {v}: not a number"))),
    }
}

fn run(args: &[String]) -> Result<Value, Fail> {
    let (cmd, path) = match args {
        [c, p, ..] => (c.as_str(), p.as_str()),
        _ => {
            return Err(usage(
                "expected a command (logs, exercise, iops) and a device",
            ))
        }
    };
    let rest = &args[2..];
    let qd: usize = num(rest, "--qd", 16)?;
    if !(1..=1024).contains(&qd) {
        return Err(usage(format!("--qd {qd}: must be 1..=1024")));
    }
    let open = |qd: usize| {
        NvmePassthru::open(
            path,
            NvmeConfig {
                queue_depth: qd as u32,
                ..NvmeConfig::default()
            },
        )
    };
    match cmd {
        "logs" => logs(&mut open(4)?),
        "exercise" => {
            let spec = flag(rest, "--blocks")
                .ok_or_else(|| usage("exercise needs --blocks H:N[,H:N...]"))?;
            let plan = spec
                .split(',')
                .map(|p| {
                    let (h, n) = p
                        .split_once(':')
                        .ok_or_else(|| usage(format!("--blocks {p}: expected H:N")))?;
                    match (h.parse::<u16>(), n.parse::<u64>()) {
                        (Ok(h), Ok(n)) if n > 0 => Ok((h, n)),
                        _ => Err(usage(format!(
                            "--blocks {p}: handle and a positive block count expected"
                        ))),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            let trim = match flag(rest, "--trim") {
                None => None,
                Some(t) => Some(
                    t.parse::<u16>()
                        .map_err(|_| usage(format!("--trim {t}: not a handle")))?,
                ),
            };
            exercise(&mut open(4)?, &plan, trim)
        }
        "iops" => {
            let write = match flag(rest, "--rw") {
                Some("randread") => false,
                Some("randwrite") => true,
                other => {
                    return Err(usage(format!(
                        "--rw {}: randread or randwrite",
                        other.unwrap_or("(missing)")
                    )))
                }
            };
            let bs = num(rest, "--bs", 4096usize)?;
            let ios = num(rest, "--ios", 20_000u64)?;
            let handle = num(rest, "--handle", 0u16)?;
            iops(&mut open(qd)?, write, bs, qd, ios, handle)
        }
        other => Err(usage(format!(
            "unknown command {other:?} (logs, exercise, iops)"
        ))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "{}",
            include_str!("lachesis-nvme.rs")
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").trim_start_matches(' '))
                .collect::<Vec<_>>()
                .join("\n")
        );
        return if args.is_empty() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        };
    }
    match run(&args) {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err(Fail::Usage(m)) => {
            eprintln!("lachesis-nvme: {m}");
            ExitCode::from(2)
        }
        Err(Fail::Device(m)) => {
            eprintln!("lachesis-nvme: {m}");
            ExitCode::from(1)
        }
    }
}
