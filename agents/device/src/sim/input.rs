//! The input of `lachesis-devsim`: a simulated FDP SSD and a placed stream mix, as the
//! controller's placement broker writes it. The contract is `api-schemas/devsim-input.schema.json`
//! (fixtures in `api-schemas/fixtures/devsim-input/`, checked by `tests/devsim_contract.rs` and
//! the controller's `test_placement_devsim_contract.py`).
//!
//! [`Input::parse`] rejects what the schema rejects (serde, plus the bounds serde cannot
//! state); [`Input::plan`] adds the rules across fields the schema cannot state and builds
//! the device and the mix. Every error names the field.

use serde::Deserialize;

use super::workload::{Mix, Region, Stream};
use super::{SimConfig, SimSsd};
use crate::nvme::logpage::RuhType;
use crate::PlacementHandle;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    pub device: Device,
    pub streams: Vec<StreamSpec>,
    #[serde(default = "default_warmup")]
    pub warmup_turns: f64,
    #[serde(default = "default_measure")]
    pub measure_turns: f64,
    #[serde(default)]
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    pub reclaim_units: u32,
    #[serde(default = "default_ppr")]
    pub pages_per_ru: u32,
    pub overprovisioning: f64,
    pub handles: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    Random,
    Sequential,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSpec {
    pub pattern: Pattern,
    pub space: f64,
    pub writes: f64,
    pub handle: u16,
    #[serde(default)]
    pub trim: bool,
}

fn default_warmup() -> f64 {
    3.0
}
fn default_measure() -> f64 {
    6.0
}
fn default_ppr() -> u32 {
    256
}

/// Most handles a device has (the schema's bound; also what [`SimConfig`] accepts).
pub const MAX_HANDLES: u16 = 256;

/// Longest turn, in device capacities: a stream with a tiny write share would otherwise make
/// the run last for ever.
const MAX_TURN_CAPACITIES: f64 = 20.0;

/// A checked input, ready to run: the device, the mix and the page counts of the two phases.
pub struct Plan {
    pub ssd: SimSsd,
    pub mix: Mix,
    pub warmup_pages: u64,
    pub measure_pages: u64,
    /// Host writes in which the slowest stream rewrites its space once.
    pub turn_pages: u64,
}

impl Input {
    /// JSON text to an input whose every field is within the schema's bounds.
    pub fn parse(text: &str) -> Result<Input, String> {
        let input: Input = serde_json::from_str(text).map_err(|e| format!("bad input: {e}"))?;
        input.check()?;
        Ok(input)
    }

    /// The schema's bounds that serde's types do not carry.
    fn check(&self) -> Result<(), String> {
        let d = &self.device;
        if d.reclaim_units == 0 {
            return Err("device.reclaim_units must be at least 1".into());
        }
        if d.pages_per_ru < 4 || !d.pages_per_ru.is_multiple_of(4) {
            return Err("device.pages_per_ru must be a positive multiple of 4".into());
        }
        if !(d.overprovisioning.is_finite() && d.overprovisioning > 0.0) {
            return Err("device.overprovisioning must be > 0".into());
        }
        if d.handles == 0 || d.handles > MAX_HANDLES {
            return Err(format!("device.handles must be in 1..={MAX_HANDLES}"));
        }
        if !(self.warmup_turns.is_finite() && self.warmup_turns >= 0.0) {
            return Err("warmup_turns must be >= 0".into());
        }
        if !(self.measure_turns.is_finite() && self.measure_turns > 0.0) {
            return Err("measure_turns must be > 0".into());
        }
        if self.streams.is_empty() {
            return Err("streams: at least one stream is needed".into());
        }
        for (i, s) in self.streams.iter().enumerate() {
            if !(s.space > 0.0 && s.space <= 1.0) {
                return Err(format!("streams[{i}].space must be in (0, 1]"));
            }
            if !(0.0..=1.0).contains(&s.writes) {
                return Err(format!("streams[{i}].writes must be in [0, 1]"));
            }
            if s.handle >= MAX_HANDLES {
                return Err(format!("streams[{i}].handle must be below {MAX_HANDLES}"));
            }
        }
        Ok(())
    }

    /// The device and the mix; errors name the field (rules across fields included).
    pub fn plan(&self) -> Result<Plan, String> {
        self.check()?;
        let d = &self.device;
        let ssd = SimSsd::new(SimConfig {
            pages_per_erase_block: d.pages_per_ru / 4,
            erase_blocks_per_ru: 4,
            rus_per_group: d.reclaim_units,
            overprovisioning: d.overprovisioning,
            handles: vec![RuhType::InitiallyIsolated; usize::from(d.handles)],
            ..Default::default()
        })
        .map_err(|e| format!("device: {e}"))?;
        let n = ssd.logical_pages();
        let ppr = u64::from(ssd.pages_per_ru());
        let mut start = 0u64;
        let mut streams = Vec::new();
        let mut turn = 0f64;
        for (i, s) in self.streams.iter().enumerate() {
            if s.handle >= d.handles {
                return Err(format!(
                    "streams[{i}].handle {} is not one of the device's {} handles",
                    s.handle, d.handles
                ));
            }
            let mut pages = (s.space * n as f64).round() as u64;
            if s.trim {
                pages = pages / ppr * ppr;
            }
            if pages == 0 {
                return Err(format!(
                    "streams[{i}]: space {} is less than one reclaim unit",
                    s.space
                ));
            }
            if start + pages > n {
                // Rounding may overshoot a 100%-utilised device by a page or two.
                if start + pages - n <= self.streams.len() as u64 && !s.trim {
                    pages = n - start;
                } else {
                    return Err(format!(
                        "streams[..={i}]: spaces add up to more than the device"
                    ));
                }
            }
            let region = Region { start, pages };
            start += pages;
            let handle = PlacementHandle(s.handle);
            let stream = match s.pattern {
                Pattern::Random => Stream::Random { region, handle },
                Pattern::Sequential => Stream::Log {
                    region,
                    handle,
                    trim_pages: s.trim.then_some(ppr),
                    cursor: 0,
                },
            };
            if s.writes > 0.0 {
                turn = turn.max(pages as f64 / s.writes);
            }
            streams.push((s.writes, stream));
        }
        let turn = turn.min(MAX_TURN_CAPACITIES * n as f64).max(n as f64 / 4.0) as u64;
        let mix = Mix::new(streams, self.seed).map_err(|e| format!("streams: {e}"))?;
        Ok(Plan {
            ssd,
            mix,
            warmup_pages: (self.warmup_turns * turn as f64) as u64,
            measure_pages: ((self.measure_turns * turn as f64) as u64).max(1),
            turn_pages: turn,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"{"device": {"reclaim_units": 256, "overprovisioning": 0.1, "handles": 2},
        "streams": [{"pattern": "random", "space": 0.5, "writes": 0.5, "handle": 0},
                    {"pattern": "sequential", "space": 0.5, "writes": 0.5, "handle": 1, "trim": true}]}"#;

    #[test]
    fn defaults_fill_in() {
        let i = Input::parse(ONE).unwrap();
        assert_eq!(
            (
                i.device.pages_per_ru,
                i.warmup_turns,
                i.measure_turns,
                i.seed
            ),
            (256, 3.0, 6.0, 0)
        );
        let p = i.plan().unwrap();
        assert_eq!(p.measure_pages, 6 * p.turn_pages);
    }

    #[test]
    fn rules_across_fields_name_the_field() {
        let mut i = Input::parse(ONE).unwrap();
        i.streams[1].handle = 2;
        assert!(i.plan().err().unwrap().starts_with("streams[1].handle 2"));
        let mut i = Input::parse(ONE).unwrap();
        i.streams[0].space = 0.9;
        assert!(i
            .plan()
            .err()
            .unwrap()
            .contains("add up to more than the device"));
        let mut i = Input::parse(ONE).unwrap();
        i.streams[0].writes = 0.9;
        assert!(i.plan().err().unwrap().starts_with("streams: "));
    }

    #[test]
    fn bounds_serde_cannot_state_are_checked() {
        let bad = ONE.replace("\"handles\": 2", "\"handles\": 257");
        assert!(Input::parse(&bad).unwrap_err().contains("device.handles"));
        let bad = ONE.replace(
            "\"space\": 0.5, \"writes\": 0.5, \"handle\": 0",
            "\"space\": 1.5, \"writes\": 0.5, \"handle\": 0",
        );
        assert!(Input::parse(&bad).unwrap_err().contains("streams[0].space"));
    }
}
