//! lachesis-engine-replay: one cache engine, one deterministic workload, one device; prints
//! the host bytes each placement handle received, as the engine sent them and as the device
//! counted them, so that the same run on the simulated SSD and on a real NVMe FDP namespace
//! can be compared (e2e/guest does, in a QEMU guest).
//!
//! Usage:
//!   lachesis-engine-replay --device SPEC --engine loc|hybrid|kangaroo [--span-mib 64]
//!       [--requests 20000] [--keys 20000] [--alpha 0.9] [--sizes wide] [--seed 1]
//!       [--region-kib 1024] [--dram-kib 1024]
//! SPEC: `measured:PATH:SIZE[:KEY=VALUE,...]` (the measuring device: data in a file, the FDP
//! simulator beside it) or `nvme:/dev/ngXnY` (passthrough; every write is followed by an IO
//! Management Receive, and the change of each handle's Reclaim Unit Available Media Writes is
//! what the device counted for it). The large-object log is on handle 0, the small-object
//! engine on handle 1 (KLog and KSet share it). Regions are --region-kib whatever the device's
//! reclaim unit, so both devices see the same writes; they must be a multiple of it.
//! Each request is a get; a miss sets the object (cachebench's values, checked on every hit).
//! stdout: {"engine", "device", "requests", "hits", "bad_hits", "sent": {handle: bytes},
//!          "device_counted": {handle: bytes}, "other_handle_changes", "fdp_host_bytes"}
//! Bad input: a message on stderr and exit 2; an engine or device error: exit 1.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use lachesis_cache::hybrid::SmallFactory;
use lachesis_cache::kangaroo::{Kangaroo, KangarooConfig};
use lachesis_cache::workload::{value_for, SizeDist, Zipf};
use lachesis_cache::{Engine, Hybrid, HybridConfig, Loc, LocConfig, SharedDevice, Span};
use lachesis_device::measured::MeasuredSpec;
use lachesis_device::nvme::{NvmeConfig, NvmePassthru};
use lachesis_device::{BlockDevice, FdpLogs, Geometry, PlacementHandle};
use serde_json::json;

/// Counts what the engine sends per handle; on a passthrough device also what the device
/// counted, from its RUH status after each write.
struct Observed {
    dev: Box<dyn BlockDevice + Send>,
    nvme: Option<NvmePassthru>,
    sent: Vec<u64>,
    ruamw: Vec<u64>,
    counted: Vec<u64>,
    /// Writes after which a handle other than the written one changed.
    other_changes: u64,
    ru_blocks: u64,
    block: u64,
    error: Option<String>,
}

impl Observed {
    fn status(&mut self) -> lachesis_device::Result<Vec<u64>> {
        let nvme = self.nvme.as_mut().expect("status only on nvme");
        Ok(nvme
            .ruh_status()?
            .iter()
            .map(|s| s.available_media_writes)
            .collect())
    }

    /// Blocks the device took from handle `h`'s reclaim units between two readings: the drop
    /// in available media writes, or, when the unit filled and the handle moved to a fresh
    /// one, the rest of the old unit plus what the new one took.
    fn consumed(&self, before: u64, after: u64) -> u64 {
        if after <= before {
            before - after
        } else {
            before + (self.ru_blocks - after)
        }
    }
}

impl BlockDevice for Observed {
    fn geometry(&self) -> &Geometry {
        self.dev.geometry()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> lachesis_device::Result<()> {
        self.dev.read(offset, buf)
    }
    fn write(
        &mut self,
        offset: u64,
        buf: &[u8],
        handle: PlacementHandle,
    ) -> lachesis_device::Result<()> {
        if self.nvme.is_none() {
            self.sent[usize::from(handle.0)] += buf.len() as u64;
            return self.dev.write(offset, buf, handle);
        }
        // One command's worth at a time (the backend splits larger writes the same way), so a
        // write never spans a whole reclaim unit and each reading of the RUH status tells
        // which handle's unit took it.
        let step = self.dev.geometry().max_io_bytes as usize;
        for (i, part) in buf.chunks(step).enumerate() {
            self.dev.write(offset + (i * step) as u64, part, handle)?;
            self.sent[usize::from(handle.0)] += part.len() as u64;
            let now = self.status()?;
            for (h, (&b, &a)) in self.ruamw.iter().zip(&now).enumerate() {
                let c = self.consumed(b, a);
                if c > 0 && h != usize::from(handle.0) {
                    self.other_changes += 1;
                }
                self.counted[h] += c * self.block;
            }
            if part.len() as u64 >= self.ru_blocks * self.block && self.error.is_none() {
                self.error = Some(format!(
                    "a write of {} bytes spans a whole reclaim unit: the device's count is ambiguous",
                    part.len()
                ));
            }
            self.ruamw = now;
        }
        Ok(())
    }
    fn trim(&mut self, offset: u64, len: u64) -> lachesis_device::Result<()> {
        self.dev.trim(offset, len)
    }
    fn flush(&mut self) -> lachesis_device::Result<()> {
        self.dev.flush()
    }
}

/// The passthrough device opened twice: one instance takes the engine's IO, the other reads
/// the RUH status (a second ring on the same namespace).
fn open(
    spec: &str,
) -> Result<
    (
        Observed,
        Option<lachesis_device::measured::MeasuredStatsReader>,
    ),
    String,
> {
    let (dev, nvme, reader): (Box<dyn BlockDevice + Send>, _, _) =
        if let Some(p) = spec.strip_prefix("nvme:") {
            let d = NvmePassthru::open(p, NvmeConfig::default()).map_err(|e| e.to_string())?;
            let s = NvmePassthru::open(
                p,
                NvmeConfig {
                    queue_depth: 2,
                    ..NvmeConfig::default()
                },
            )
            .map_err(|e| e.to_string())?;
            (Box::new(d), Some(s), None)
        } else if spec.starts_with("measured:") {
            let d = MeasuredSpec::parse(spec)
                .and_then(|s| s.open())
                .map_err(|e| e.to_string())?;
            let r = d.stats_reader();
            (Box::new(d), None, Some(r))
        } else {
            return Err(format!(
                "--device {spec}: expected measured:PATH:SIZE[:...] or nvme:/dev/ngXnY"
            ));
        };
    let g = dev.geometry().clone();
    let handles = usize::from(g.placement_handles);
    let mut o = Observed {
        dev,
        nvme,
        sent: vec![0; handles],
        ruamw: Vec::new(),
        counted: vec![0; handles],
        other_changes: 0,
        ru_blocks: g.reclaim_unit_bytes / u64::from(g.block_size),
        block: u64::from(g.block_size),
        error: None,
    };
    if o.nvme.is_some() {
        o.ruamw = o.status().map_err(|e| e.to_string())?;
    }
    Ok((o, reader))
}

struct Opts {
    device: String,
    engine: String,
    span_mib: u64,
    requests: u64,
    keys: u64,
    alpha: f64,
    sizes: String,
    seed: u64,
    region_kib: u64,
    dram_kib: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        device: String::new(),
        engine: String::new(),
        span_mib: 64,
        requests: 20_000,
        keys: 20_000,
        alpha: 0.9,
        sizes: "wide".into(),
        seed: 1,
        region_kib: 1024,
        dram_kib: 1024,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag}: missing value"))?;
        let n = || {
            v.parse::<u64>()
                .map_err(|_| format!("{flag} {v}: not a number"))
        };
        match flag.as_str() {
            "--device" => o.device = v.clone(),
            "--engine" => o.engine = v.clone(),
            "--span-mib" => o.span_mib = n()?,
            "--requests" => o.requests = n()?,
            "--keys" => o.keys = n()?,
            "--alpha" => {
                o.alpha = v
                    .parse()
                    .map_err(|_| format!("--alpha {v}: not a number"))?
            }
            "--sizes" => o.sizes = v.clone(),
            "--seed" => o.seed = n()?,
            "--region-kib" => o.region_kib = n()?,
            "--dram-kib" => o.dram_kib = n()? as usize,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if o.device.is_empty() || !matches!(o.engine.as_str(), "loc" | "hybrid" | "kangaroo") {
        return Err("--device and --engine loc|hybrid|kangaroo are required".into());
    }
    Ok(o)
}

fn build(o: &Opts, dev: SharedDevice) -> lachesis_cache::Result<Box<dyn Engine>> {
    let span = Span {
        device: dev,
        offset: 0,
        len: o.span_mib << 20,
    };
    let mut loc = LocConfig::new(span.clone(), PlacementHandle(0));
    loc.region_bytes = o.region_kib << 10;
    Ok(match o.engine.as_str() {
        "loc" => Box::new(Loc::new(loc)?),
        "kangaroo" => {
            let c =
                KangarooConfig::new(span, PlacementHandle(1), PlacementHandle(1)).fit_partitions();
            Box::new(Kangaroo::new(c)?)
        }
        _ => {
            let small: SmallFactory = Box::new(|span: Span| {
                let c = KangarooConfig::new(span, PlacementHandle(1), PlacementHandle(1))
                    .fit_partitions();
                Ok(Box::new(Kangaroo::new(c)?) as Box<dyn Engine>)
            });
            Box::new(Hybrid::new(HybridConfig {
                span: span.clone(),
                flash_bytes: span.len,
                dram_bytes: o.dram_kib << 10,
                small_fraction: 0.25,
                small_align: 0,
                small_threshold: 2048,
                shards: 1,
                loc,
                small,
            })?)
        }
    })
}

fn run(o: &Opts) -> Result<serde_json::Value, (u8, String)> {
    let input = |e: String| (2u8, e);
    let (observed, measured) = open(&o.device).map_err(input)?;
    let sizes = SizeDist::parse(&o.sizes).map_err(|e| input(e.to_string()))?;
    let mut zipf = Zipf::new(o.keys, o.alpha, o.seed).map_err(|e| input(e.to_string()))?;
    let shared = Arc::new(Mutex::new(observed));
    let mut engine = build(o, shared.clone()).map_err(|e| match e {
        lachesis_cache::Error::Config(m) => (2, m),
        e => (1, e.to_string()),
    })?;
    let (mut hits, mut bad) = (0u64, 0u64);
    let fail = |e: lachesis_cache::Error| (1u8, e.to_string());
    for i in 0..o.requests {
        let id = zipf.next_key();
        let key = id.to_le_bytes();
        let want = value_for(id, sizes.size_of(id));
        match engine.get(&key).map_err(fail)? {
            Some(v) => {
                hits += 1;
                bad += u64::from(v != want);
            }
            None => {
                engine.set(&key, &want).map_err(fail)?;
            }
        }
        if (i + 1) % 5000 == 0 {
            eprintln!(
                "lachesis-engine-replay: {} of {} requests",
                i + 1,
                o.requests
            );
        }
    }
    drop(engine);
    let mut obs = shared.lock().unwrap_or_else(|p| p.into_inner());
    obs.flush().map_err(|e| (1, e.to_string()))?;
    if let Some(e) = &obs.error {
        return Err((1, e.clone()));
    }
    let per = |v: &[u64]| -> BTreeMap<String, u64> {
        v.iter()
            .enumerate()
            .filter(|(_, b)| **b > 0)
            .map(|(h, b)| (h.to_string(), *b))
            .collect()
    };
    let (counted, fdp_host) = match (&measured, obs.nvme.as_mut()) {
        (Some(r), _) => {
            let s = r.stats();
            let c: Vec<u64> = s.handles.iter().map(|h| h.host_bytes_written).collect();
            (c, u128::from(s.host_bytes_written))
        }
        (None, Some(n)) => {
            let host = n
                .fdp_stats()
                .map_err(|e| (1, e.to_string()))?
                .host_bytes_written;
            (obs.counted.clone(), host)
        }
        _ => unreachable!("a device is either measured or nvme"),
    };
    Ok(json!({
        "engine": o.engine,
        "device": o.device,
        "requests": o.requests,
        "hits": hits,
        "bad_hits": bad,
        "sent": per(&obs.sent),
        "device_counted": per(&counted),
        "other_handle_changes": obs.other_changes,
        "fdp_host_bytes": fdp_host,
    }))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        for l in include_str!("lachesis-engine-replay.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
        {
            println!("{}", l.trim_start_matches("//!").trim_start_matches(' '));
        }
        return ExitCode::SUCCESS;
    }
    let result = parse(&args).map_err(|e| (2, e)).and_then(|o| run(&o));
    match result {
        Ok(v) => {
            println!("{v}");
            ExitCode::SUCCESS
        }
        Err((code, m)) => {
            eprintln!("lachesis-engine-replay: {m}");
            ExitCode::from(code)
        }
    }
}
