//! The front end's counters: [`KvStats`] (serde, for the agent's telemetry) and the same
//! figures as `STAT` lines (`stats`, `stats lachesis`), so memcached tools read them too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use crate::cache::CacheStats;
use crate::tenant::Counters;

#[derive(Default)]
pub struct ConnCounters {
    pub current: AtomicU64,
    pub total: AtomicU64,
    /// Refused at accept: `max_connections` were open.
    pub rejected: AtomicU64,
    /// Closed because their unsent replies passed `output_bound`.
    pub closed_output_bound: AtomicU64,
    /// Closed on a line longer than the parser accepts.
    pub closed_bad_input: AtomicU64,
    pub bad_commands: AtomicU64,
    /// Connection threads serving (`server::Workers`), set when a listener starts.
    pub threads: AtomicU64,
}

impl ConnCounters {
    pub fn snapshot(&self) -> ConnectionStats {
        ConnectionStats {
            current: self.current.load(Relaxed),
            total: self.total.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            closed_output_bound: self.closed_output_bound.load(Relaxed),
            closed_bad_input: self.closed_bad_input.load(Relaxed),
            bad_commands: self.bad_commands.load(Relaxed),
            threads: self.threads.load(Relaxed),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ConnectionStats {
    pub current: u64,
    pub total: u64,
    pub rejected: u64,
    pub closed_output_bound: u64,
    pub closed_bad_input: u64,
    pub bad_commands: u64,
    pub threads: u64,
}

/// One tenant: its requests, and the caches it owns summed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TenantStats {
    pub gets: u64,
    pub get_hits: u64,
    pub sets: u64,
    pub deletes: u64,
    /// Requests its rate limit delayed.
    pub rate_limited: u64,
    /// Requests sent to another agent's front end.
    pub forwarded: u64,
    pub objects: u64,
    /// Bytes of keys and values it stored (cumulative).
    pub bytes_written: u64,
    /// Flash reads that failed their checksum (answered as misses).
    pub corrupt_reads: u64,
    pub flash_bytes: u64,
    pub dram_bytes: u64,
    pub flash_bytes_written: u64,
}

impl TenantStats {
    pub fn from_counters(c: &Counters) -> TenantStats {
        TenantStats {
            gets: c.gets.load(Relaxed),
            get_hits: c.hits.load(Relaxed),
            sets: c.sets.load(Relaxed),
            deletes: c.deletes.load(Relaxed),
            rate_limited: c.rate_limited.load(Relaxed),
            forwarded: c.forwarded.load(Relaxed),
            ..TenantStats::default()
        }
    }

    pub fn add_cache(&mut self, c: &CacheStats) {
        self.objects += c.total.objects;
        self.bytes_written += c.total.app_bytes_written;
        self.corrupt_reads += c.total.corrupt_reads;
        self.flash_bytes += c.flash_bytes;
        self.dram_bytes += c.dram_bytes;
        self.flash_bytes_written += c.total.flash_bytes_written;
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StageStats {
    pub owner: Option<String>,
    /// The placement handle each engine part writes with (`placement:<stage>:<part>`).
    pub placement: Vec<(String, u16)>,
    #[serde(flatten)]
    pub cache: CacheStats,
}

/// One device: host and media bytes since the agent opened it (media only when it
/// measures; DLWA = media / host), and its regions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceStats {
    pub host_bytes: u64,
    pub media_bytes: Option<u64>,
    pub regions: u32,
    pub free_regions: u32,
    pub region_bytes: u64,
    /// Per placement handle that wrote anything (measuring devices only):
    /// `handle:<device>:<h>:<field>`.
    pub handles: Vec<HandleBytes>,
}

/// One placement handle of a measuring device since it was opened. GC's relocations are
/// charged to the handle whose write put the data there, so `media_bytes / host_bytes` is
/// that stream's own DLWA.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HandleBytes {
    pub handle: u16,
    pub host_bytes: u64,
    pub media_bytes: u64,
    pub gc_bytes: u64,
    pub deallocated_bytes: u64,
    pub valid_bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KvStats {
    pub tenants: BTreeMap<String, TenantStats>,
    /// Every cache (`dram/<tenant>`: a tenant's DRAM cache without a stage).
    pub stages: BTreeMap<String, StageStats>,
    pub devices: BTreeMap<String, DeviceStats>,
    pub connections: ConnectionStats,
}

/// The process's user and system CPU time as memcached prints them (`seconds.micros`), for
/// CPU per request over a run from two `stats` (what `bench/kv` reports).
fn process_cpu() -> (String, String) {
    // SAFETY: getrusage writes the struct it is given; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let f = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (f(ru.ru_utime), f(ru.ru_stime))
}

fn stat(out: &mut Vec<u8>, name: &str, v: impl std::fmt::Display) {
    out.extend_from_slice(format!("STAT {name} {v}\r\n").as_bytes());
}

impl KvStats {
    /// memcached's general statistics (`stats`), summed over tenants.
    pub fn write_general(&self, out: &mut Vec<u8>, uptime: u64, now: u64, max_bytes: u64) {
        let t = self
            .tenants
            .values()
            .fold(TenantStats::default(), |mut a, t| {
                a.gets += t.gets;
                a.get_hits += t.get_hits;
                a.sets += t.sets;
                a.deletes += t.deletes;
                a.objects += t.objects;
                a.dram_bytes += t.dram_bytes;
                a
            });
        let c = &self.connections;
        stat(out, "pid", std::process::id());
        stat(out, "uptime", uptime);
        stat(out, "time", now);
        stat(out, "version", "1.6.21-lachesis");
        stat(out, "pointer_size", 64);
        let (user, system) = process_cpu();
        stat(out, "rusage_user", user);
        stat(out, "rusage_system", system);
        stat(out, "curr_connections", c.current);
        stat(out, "total_connections", c.total);
        stat(out, "rejected_connections", c.rejected);
        stat(out, "cmd_get", t.gets);
        stat(out, "cmd_set", t.sets);
        stat(out, "get_hits", t.get_hits);
        stat(out, "get_misses", t.gets - t.get_hits.min(t.gets));
        stat(out, "delete_cmds", t.deletes);
        stat(out, "curr_items", t.objects);
        stat(out, "limit_maxbytes", max_bytes);
        stat(out, "threads", c.threads);
        out.extend_from_slice(b"END\r\n");
    }

    /// Every figure of [`KvStats`] (`stats lachesis`): `tenant:<name>:<field>`,
    /// `stage:<name>:<field>`, `stage:<name>:<part>:<field>`, `placement:<stage>:<part>`,
    /// `device:<name>:<field>`, `handle:<device>:<handle>:<field>`.
    pub fn write_lachesis(&self, out: &mut Vec<u8>) {
        for (name, t) in &self.tenants {
            for (k, v) in fields(t) {
                stat(out, &format!("tenant:{name}:{k}"), v);
            }
        }
        for (name, s) in &self.stages {
            stat(
                out,
                &format!("stage:{name}:owner"),
                s.owner.as_deref().unwrap_or("-"),
            );
            stat(out, &format!("stage:{name}:engine"), s.cache.engine);
            stat(
                out,
                &format!("stage:{name}:flash_bytes"),
                s.cache.flash_bytes,
            );
            stat(out, &format!("stage:{name}:dram_bytes"), s.cache.dram_bytes);
            if let Some(d) = &s.cache.device {
                stat(out, &format!("stage:{name}:device"), d);
            }
            for (k, v) in fields(&s.cache.total) {
                stat(out, &format!("stage:{name}:{k}"), v);
            }
            for (part, p) in &s.cache.parts {
                for (k, v) in fields(p) {
                    stat(out, &format!("stage:{name}:{part}:{k}"), v);
                }
            }
            for (part, h) in &s.placement {
                stat(out, &format!("placement:{name}:{part}"), h);
            }
        }
        for (name, d) in &self.devices {
            for (k, v) in fields(d) {
                stat(out, &format!("device:{name}:{k}"), v);
            }
            for h in &d.handles {
                for (k, v) in fields(h).into_iter().filter(|(k, _)| k != "handle") {
                    stat(out, &format!("handle:{name}:{}:{k}", h.handle), v);
                }
            }
        }
        for (k, v) in fields(&self.connections) {
            stat(out, &format!("connections:{k}"), v);
        }
        out.extend_from_slice(b"END\r\n");
    }
}

/// The scalar fields of a struct, by its serde form.
fn fields<T: Serialize>(v: &T) -> Vec<(String, String)> {
    let Ok(serde_json::Value::Object(m)) = serde_json::to_value(v) else {
        return Vec::new();
    };
    m.into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::Number(n) => Some((k, n.to_string())),
            serde_json::Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(s: &KvStats) -> BTreeMap<String, String> {
        let mut out = Vec::new();
        s.write_general(&mut out, 1, 2, 3);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn cpu_time_is_reported_as_memcached_does_and_grows() {
        let s = KvStats::default();
        let cpu = |g: &BTreeMap<String, String>| {
            ["rusage_user", "rusage_system"].map(|k| {
                let (secs, micros) = g[k].split_once('.').unwrap();
                assert_eq!(micros.len(), 6, "{k} {}", g[k]);
                secs.parse::<u64>().unwrap() * 1_000_000 + micros.parse::<u64>().unwrap()
            })
        };
        let a = cpu(&general(&s));
        // Work the next reading must include.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = cpu(&general(&s));
        assert!(b[0] >= a[0] && b[1] >= a[1], "{a:?} then {b:?}");
        assert!(b[0] + b[1] > a[0] + a[1], "{a:?} then {b:?} after {x}");
    }
}
