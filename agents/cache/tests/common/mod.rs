//! Devices and engines for the integration tests: everything real, on the simulated FDP SSD
//! with its data in memory.
#![allow(dead_code)]

use lachesis_cache::hybrid::SmallFactory;
use lachesis_cache::{
    DataSim, Engine, Hybrid, HybridConfig, Loc, LocConfig, RegionEviction, SetAssoc,
    SetAssocConfig, SharedDevice, Span,
};
use lachesis_device::nvme::logpage::RuhType;
use lachesis_device::sim::SimConfig;
use lachesis_device::PlacementHandle;
use std::sync::{Arc, Mutex};

/// 64 KiB reclaim units (16 pages), `rus` of them, 4 handles.
pub fn sim_config(rus: u32, op: f64) -> SimConfig {
    SimConfig {
        pages_per_erase_block: 16,
        erase_blocks_per_ru: 1,
        rus_per_group: rus,
        overprovisioning: op,
        handles: vec![RuhType::InitiallyIsolated; 4],
        ..SimConfig::default()
    }
}

pub fn device(rus: u32, op: f64) -> (Arc<Mutex<DataSim>>, SharedDevice) {
    let d = Arc::new(Mutex::new(DataSim::new(sim_config(rus, op)).unwrap()));
    let shared: SharedDevice = d.clone();
    (d, shared)
}

pub fn span(dev: &SharedDevice, offset: u64, len: u64) -> Span {
    Span {
        device: dev.clone(),
        offset,
        len,
    }
}

pub fn loc(dev: &SharedDevice, len: u64, eviction: RegionEviction) -> Loc {
    let mut c = LocConfig::new(span(dev, 0, len), PlacementHandle(0));
    c.eviction = eviction;
    Loc::new(c).unwrap()
}

pub fn set_assoc(dev: &SharedDevice, len: u64) -> SetAssoc {
    SetAssoc::new(SetAssocConfig::new(span(dev, 0, len), PlacementHandle(1))).unwrap()
}

pub fn set_assoc_factory() -> SmallFactory {
    Box::new(|span: Span| {
        Ok(Box::new(SetAssoc::new(SetAssocConfig::new(
            span,
            PlacementHandle(1),
        ))?) as Box<dyn Engine>)
    })
}

pub fn hybrid(dev: &SharedDevice, len: u64, flash: u64, dram: usize) -> Hybrid {
    Hybrid::new(HybridConfig {
        span: span(dev, 0, len),
        flash_bytes: flash,
        dram_bytes: dram,
        small_fraction: 0.25,
        small_align: 0,
        small_threshold: 2048,
        shards: 4,
        loc: LocConfig::new(span(dev, 0, len), PlacementHandle(0)),
        small: set_assoc_factory(),
    })
    .unwrap()
}

/// A value that names its key and version, of `len` bytes.
pub fn value(key: u32, version: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(8));
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    while v.len() < len {
        v.push((key as u8) ^ (version as u8) ^ (v.len() as u8));
    }
    v.truncate(len.max(8));
    v
}

pub fn key(k: u32) -> Vec<u8> {
    format!("key-{k:06}").into_bytes()
}
