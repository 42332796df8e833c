//! Whether a run reached steady state, judged by counts only: a figure from a cache whose
//! device still has never-written addresses, or whose log has not started evicting, measures
//! a half-empty SSD (garbage collection finds empty victims) and is refused.

use lachesis_cache::PartStats;
use serde::Serialize;

/// Device and engine counters at one request of the run.
#[derive(Clone, Debug, Default)]
pub struct Point {
    pub host_bytes: u64,
    pub media_bytes: u64,
    /// Device pages written at least once.
    pub pages_written: u64,
    pub parts: Vec<PartStats>,
}

/// What the measured window must hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Host bytes written over the window, in device capacities.
    pub device_writes: f64,
    /// Times every log (the large-object log, KLog) wrote all its units.
    pub log_wraps: f64,
    /// Times FairyWREN's FwLog wrote all its units.
    pub fwlog_cycles: f64,
    /// Largest relative difference of DLWA between the window's two halves.
    pub dlwa_spread: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            device_writes: 10.0,
            log_wraps: 3.0,
            fwlog_cycles: 5.0,
            dlwa_spread: 0.05,
        }
    }
}

/// Warmed up: every page the engine writes in was written and every log has reclaimed a unit.
pub fn warmed(p: &Point, cache_pages: u64) -> bool {
    p.pages_written >= cache_pages
        && p.parts
            .iter()
            .filter_map(|part| part.log)
            .all(|l| l.units_reclaimed > 0)
}

/// One log over the window.
#[derive(Clone, Debug, Serialize)]
pub struct LogWindow {
    pub name: String,
    pub wraps: f64,
    /// Units reclaimed (evicted, flushed, erased) in the window.
    pub evictions: u64,
    pub required_wraps: f64,
}

/// The steady-state verdict with the counts it rests on.
#[derive(Clone, Debug, Serialize)]
pub struct Judgement {
    /// Share of the device's logical pages written at least once when the window began.
    pub written_fraction: f64,
    /// Host bytes of the window / device capacity.
    pub device_writes: f64,
    pub logs: Vec<LogWindow>,
    pub dlwa_first_half: f64,
    pub dlwa_second_half: f64,
    /// Every condition not met, in words; empty at steady state.
    pub failures: Vec<String>,
}

impl Judgement {
    pub fn steady(&self) -> bool {
        self.failures.is_empty()
    }
}

fn dlwa(a: &Point, b: &Point) -> f64 {
    let host = b.host_bytes.saturating_sub(a.host_bytes);
    if host == 0 {
        0.0
    } else {
        b.media_bytes.saturating_sub(a.media_bytes) as f64 / host as f64
    }
}

/// Judges the window `start..end` (`mid` halfway by requests). `device_pages` is the device's
/// logical capacity in pages, `cache_pages` the part of it the engine writes in.
pub fn judge(
    start: &Point,
    mid: &Point,
    end: &Point,
    device_pages: u64,
    cache_pages: u64,
    page_bytes: u64,
    limits: &Limits,
) -> Judgement {
    let mut failures = Vec::new();
    let written_fraction = start.pages_written as f64 / device_pages.max(1) as f64;
    if start.pages_written < cache_pages {
        failures.push(format!(
            "warm-up ended with {} of the cache's {} device pages never written",
            cache_pages - start.pages_written.min(cache_pages),
            cache_pages
        ));
    }
    let device_writes = end.host_bytes.saturating_sub(start.host_bytes) as f64
        / (device_pages.max(1) * page_bytes) as f64;
    if device_writes < limits.device_writes {
        failures.push(format!(
            "the window wrote the device {device_writes:.2} times (at least {} needed)",
            limits.device_writes
        ));
    }
    let mut logs = Vec::new();
    for part in &end.parts {
        let Some(l1) = part.log else { continue };
        let l0 = start
            .parts
            .iter()
            .find(|p| p.name == part.name)
            .and_then(|p| p.log)
            .unwrap_or_default();
        if l0.units_reclaimed == 0 {
            failures.push(format!(
                "{} had not evicted anything when the window began",
                part.name
            ));
        }
        let wraps =
            l1.units_written.saturating_sub(l0.units_written) as f64 / l1.units.max(1) as f64;
        let required = if part.name.ends_with("fwlog") {
            limits.fwlog_cycles
        } else {
            limits.log_wraps
        };
        if wraps < required {
            failures.push(format!(
                "{} wrapped {wraps:.2} times in the window (at least {required} needed)",
                part.name
            ));
        }
        logs.push(LogWindow {
            name: part.name.clone(),
            wraps,
            evictions: l1.units_reclaimed.saturating_sub(l0.units_reclaimed),
            required_wraps: required,
        });
    }
    let (d1, d2) = (dlwa(start, mid), dlwa(mid, end));
    let spread = (d1 - d2).abs() / d1.max(d2).max(f64::MIN_POSITIVE);
    if spread > limits.dlwa_spread {
        failures.push(format!(
            "DLWA {d1:.3} in the window's first half and {d2:.3} in its second differ by {:.1}% (at most {}%)",
            spread * 100.0,
            limits.dlwa_spread * 100.0
        ));
    }
    Judgement {
        written_fraction,
        device_writes,
        logs,
        dlwa_first_half: d1,
        dlwa_second_half: d2,
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_cache::LogUnits;

    const PAGES: u64 = 1000;
    const PAGE: u64 = 4096;

    fn log(name: &str, units: u64, written: u64, reclaimed: u64) -> PartStats {
        PartStats {
            name: name.into(),
            capacity_bytes: 0,
            bytes_written: 0,
            log: Some(LogUnits {
                units,
                units_written: written,
                units_reclaimed: reclaimed,
            }),
        }
    }

    fn point(host_pages: u64, media_pages: u64, written: u64, parts: Vec<PartStats>) -> Point {
        Point {
            host_bytes: host_pages * PAGE,
            media_bytes: media_pages * PAGE,
            pages_written: written,
            parts,
        }
    }

    /// A window of 10 device writes at DLWA 2 in both halves, KLog wrapping 3 times.
    fn steady_window() -> (Point, Point, Point) {
        let start = point(5_000, 8_000, PAGES, vec![log("klog", 10, 50, 40)]);
        let mid = point(10_000, 18_000, PAGES, vec![log("klog", 10, 65, 55)]);
        let end = point(15_000, 28_000, PAGES, vec![log("klog", 10, 80, 70)]);
        (start, mid, end)
    }

    fn judge_window(s: &Point, m: &Point, e: &Point) -> Judgement {
        judge(s, m, e, PAGES, PAGES, PAGE, &Limits::default())
    }

    #[test]
    fn a_long_window_on_a_full_device_is_steady() {
        let (s, m, e) = steady_window();
        let j = judge_window(&s, &m, &e);
        assert!(j.steady(), "{:?}", j.failures);
        assert_eq!(j.device_writes, 10.0);
        assert_eq!(j.logs[0].wraps, 3.0);
        assert_eq!(j.logs[0].evictions, 30);
        assert_eq!((j.dlwa_first_half, j.dlwa_second_half), (2.0, 2.0));
        assert_eq!(j.written_fraction, 1.0);
    }

    #[test]
    fn never_written_addresses_refuse_the_run() {
        let (mut s, m, e) = steady_window();
        s.pages_written = PAGES - 1;
        assert!(!warmed(&s, PAGES));
        let j = judge_window(&s, &m, &e);
        assert_eq!(j.failures.len(), 1, "{:?}", j.failures);
        assert!(j.failures[0].contains("1 of the cache's 1000 device pages never written"));
    }

    #[test]
    fn a_log_that_never_evicted_is_not_warm() {
        let p = point(1, 1, PAGES, vec![log("large.log", 8, 8, 0)]);
        assert!(!warmed(&p, PAGES));
        let p = point(1, 1, PAGES, vec![log("large.log", 8, 9, 1)]);
        assert!(warmed(&p, PAGES));
    }

    #[test]
    fn too_few_device_writes_or_wraps_are_named() {
        let (s, m, mut e) = steady_window();
        e.host_bytes -= 100 * PAGE;
        e.parts = vec![log("klog", 10, 79, 69)];
        let j = judge_window(&s, &m, &e);
        assert_eq!(j.failures.len(), 2, "{:?}", j.failures);
        assert!(j.failures[0].contains("wrote the device 9.90 times (at least 10 needed)"));
        assert!(j
            .failures
            .iter()
            .any(|f| f.contains("klog wrapped 2.90 times")));
    }

    #[test]
    fn fwlog_needs_five_cycles() {
        let s = point(0, 0, PAGES, vec![log("small.fwlog", 10, 10, 5)]);
        let m = point(5_000, 5_000, PAGES, vec![log("small.fwlog", 10, 35, 30)]);
        let e = point(10_000, 10_000, PAGES, vec![log("small.fwlog", 10, 59, 54)]);
        let j = judge_window(&s, &m, &e);
        assert_eq!(j.failures.len(), 1, "{:?}", j.failures);
        assert!(j.failures[0].contains("4.90 times") && j.failures[0].contains("at least 5"));
        let e = point(10_000, 10_000, PAGES, vec![log("small.fwlog", 10, 60, 55)]);
        assert!(judge_window(&s, &m, &e).steady());
    }

    #[test]
    fn halves_whose_dlwa_differs_by_more_than_five_percent_are_refused() {
        let (s, m, mut e) = steady_window();
        // Second half: 5,000 host pages, 10,600 media pages: DLWA 2.12, 5.7% above 2.0.
        e.media_bytes = m.media_bytes + 10_600 * PAGE;
        let j = judge_window(&s, &m, &e);
        assert_eq!(j.failures.len(), 1, "{:?}", j.failures);
        assert!(j.failures[0].contains("differ by 5.7%"));
        // 2.10 is 4.8% above 2.0: agreed.
        e.media_bytes = m.media_bytes + 10_500 * PAGE;
        assert!(judge_window(&s, &m, &e).steady());
    }
}
