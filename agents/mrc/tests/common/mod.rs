//! Shared by the integration tests: where the real traces are, and loading
//! them once per test binary.

#![allow(dead_code)]

use lachesis_mrc::trace::{self, Format, Progress, Request};
use std::path::PathBuf;
use std::sync::OnceLock;

/// `shared/traces` beside the repository (read-only, never copied in).
pub fn traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
}

pub struct Trace {
    pub name: &'static str,
    pub requests: Vec<Request>,
}

fn load(rel: &str, format: Format) -> Vec<Request> {
    let path = traces_dir().join(rel);
    match trace::read_all(&path, format, Progress::Hidden) {
        Ok(r) => r,
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    }
}

pub fn cloudphysics() -> &'static Trace {
    static T: OnceLock<Trace> = OnceLock::new();
    T.get_or_init(|| Trace {
        name: "cloudPhysics",
        requests: load("cloudPhysicsIO.oracleGeneral.bin", Format::Oracle),
    })
}

pub fn oltp() -> &'static Trace {
    static T: OnceLock<Trace> = OnceLock::new();
    T.get_or_init(|| Trace {
        name: "OLTP",
        requests: load("arc/OLTP.lis.zst", Format::Arc),
    })
}

pub fn p3() -> &'static Trace {
    static T: OnceLock<Trace> = OnceLock::new();
    T.get_or_init(|| Trace {
        name: "P3",
        requests: load("arc/P3.lis.zst", Format::Arc),
    })
}

/// Distinct keys of a trace.
pub fn unique(requests: &[Request]) -> u64 {
    let mut keys: Vec<u64> = requests.iter().map(|r| r.key).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len() as u64
}
