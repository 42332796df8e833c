//! The stage contract (`api-schemas/bus/common.schema.json#/$defs/stage`): the typed
//! description of one data-plane stage that the controller ships in desired state and the
//! agent builds its stage chains from. Rules name a stage by [`StageConfig::name`].
//!
//! Deserialization enforces the schema (unknown fields refused, names and ranges checked), so
//! a stage that reaches the builder is well-formed; whether the agent can build it (a device
//! it has, a directory it may write) is the builder's question.

use serde::de::{Deserialize, Deserializer, Error as _};
use serde::{Serialize, Serializer};

use crate::names::{is_valid_name, name_error};

/// Largest size or rate the schema allows (1 PiB).
pub const MAX_BYTES: u64 = 1 << 50;
/// Largest IOPS limit the schema allows.
pub const MAX_IOPS: u64 = 100_000_000;
/// Most placement entries one stage carries.
pub const MAX_PLACEMENT: usize = 8;

/// `^[a-z0-9]([a-z0-9/-]{0,126}[a-z0-9])?$`: what rules name as a stage target.
pub fn is_valid_stage_name(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 128
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || *c == b'-' || *c == b'/')
}

fn de_stage_name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if is_valid_stage_name(&s) {
        Ok(s)
    } else {
        Err(D::Error::custom(format!(
            "invalid stage name {s:?}: expected 1-128 characters of a-z, 0-9, '-' and '/', \
             starting and ending with a letter or digit"
        )))
    }
}

fn de_opt_stage_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if is_valid_stage_name(&s) => Ok(Some(s)),
        Some(s) => Err(D::Error::custom(format!("invalid stage name {s:?}"))),
    }
}

fn de_opt_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(s) if is_valid_name(&s) => Ok(Some(s)),
        Some(s) => Err(D::Error::custom(name_error(&s))),
    }
}

fn bounded<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    min: u64,
    max: u64,
) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v < min || v > max {
        return Err(D::Error::custom(format!(
            "{field}: {v} is outside {min}..={max}"
        )));
    }
    Ok(v)
}

fn de_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    bounded(d, "size_bytes", 0, MAX_BYTES)
}

fn de_max_dirty<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    bounded(d, "max_dirty_bytes", 4096, MAX_BYTES)
}

fn de_opt_bounded<'de, D: Deserializer<'de>>(
    d: D,
    field: &str,
    max: u64,
) -> Result<Option<u64>, D::Error> {
    match Option::<u64>::deserialize(d)? {
        Some(v) if v == 0 || v > max => Err(D::Error::custom(format!(
            "{field}: {v} is outside 1..={max}"
        ))),
        v => Ok(v),
    }
}

fn de_iops<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_opt_bounded(d, "iops", MAX_IOPS)
}

fn de_bytes_per_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_opt_bounded(d, "bytes_per_s", MAX_BYTES)
}

fn de_placement<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PartHandle>, D::Error> {
    let v = Vec::<PartHandle>::deserialize(d)?;
    if v.len() > MAX_PLACEMENT {
        return Err(D::Error::custom(format!(
            "placement: {} entries, at most {MAX_PLACEMENT}",
            v.len()
        )));
    }
    Ok(v)
}

/// Why `path` is not an absolute, normal host path of 2 to 4096 characters (no `.` or `..`
/// segment, no `//`, no trailing `/`, no control character), or `None` if it is one: the
/// schema's `$defs/host_path`.
pub fn host_path_error(path: &str) -> Option<String> {
    let n = path.chars().count();
    if !path.starts_with('/') || !(2..=4096).contains(&n) {
        return Some(format!(
            "{path:?}: expected an absolute path of 2 to 4096 characters"
        ));
    }
    if path.chars().any(|c| c.is_ascii_control()) {
        return Some(format!("{path:?}: control characters are not allowed"));
    }
    if path[1..]
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Some(format!(
            "{path:?}: expected a normal path (no '.' or '..' segment, no '//', no trailing '/')"
        ));
    }
    None
}

fn de_dir<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    match host_path_error(&s) {
        Some(why) => Err(D::Error::custom(format!("dir {why}"))),
        None => Ok(s),
    }
}

/// One stage of an agent, as the controller ships it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StageConfig {
    Cache(CacheConfig),
    #[serde(rename = "ratelimit")]
    RateLimit(RateLimitConfig),
    Log(LogConfig),
}

impl StageConfig {
    pub fn name(&self) -> &str {
        match self {
            StageConfig::Cache(c) => &c.name,
            StageConfig::RateLimit(r) => &r.name,
            StageConfig::Log(l) => &l.name,
        }
    }

    pub fn owner(&self) -> Option<&str> {
        match self {
            StageConfig::Cache(c) => c.owner.as_deref(),
            StageConfig::RateLimit(r) => r.owner.as_deref(),
            StageConfig::Log(l) => l.owner.as_deref(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            StageConfig::Cache(_) => "cache",
            StageConfig::RateLimit(_) => "ratelimit",
            StageConfig::Log(_) => "log",
        }
    }

    /// What a live stage built from `self` must do to become `new` (a stage of the same
    /// name): the one decision every reconciler (the FUSE switch, the KV front end, the
    /// server level) makes per stage, so that they keep, resize and rebuild alike.
    pub fn change_to(&self, new: &StageConfig) -> StageChange {
        match (self, new) {
            (a, b) if a == b => StageChange::Keep,
            (StageConfig::Cache(a), StageConfig::Cache(b)) => a.change_to(b),
            (StageConfig::Log(a), StageConfig::Log(b)) if a.same_but_reclaim(b) => {
                StageChange::Reclaim(b.reclaim_bytes_per_s)
            }
            _ => StageChange::Rebuild,
        }
    }
}

/// How a live stage becomes the stage of the same name a new desired state declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageChange {
    /// Nothing changed: the live stage stays, warm.
    Keep,
    /// A cache stage whose size alone changed: resized in place (what it drops is clean).
    Resize { from: u64, to: u64 },
    /// A log whose reclaim rate alone changed: the log and its data stay, at the new rate.
    Reclaim(Option<u64>),
    /// Anything else: a new stage is built; the old one writes back what it holds and goes.
    Rebuild,
}

/// Where a cache stage keeps its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheEngine {
    /// In memory.
    Dram,
    /// CacheLib's large-object log on flash.
    Loc,
    /// Kangaroo (KLog + KSet) on flash.
    Kangaroo,
    /// Kangaroo for small objects, the log for large ones.
    Hybrid,
    /// FairyWREN (FwLog + FwSets) on flash: erase units of the device's reclaim unit,
    /// reclaimed and trimmed whole by the engine.
    Fairywren,
    /// FairyWREN for small objects, the log for large ones.
    #[serde(rename = "hybrid-fairywren")]
    HybridFairywren,
}

impl CacheEngine {
    pub fn on_flash(self) -> bool {
        self != CacheEngine::Dram
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteMode {
    /// Writes go on and update the cached blocks.
    Through,
    /// Writes are acknowledged once cached and written back later.
    Back,
    /// Writes go on and drop the cached blocks.
    Around,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Eviction {
    Lru,
    Fifo,
}

/// A write stream of a cache engine: what the placement broker hands a handle to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub enum EnginePart {
    #[serde(rename = "loc")]
    Loc,
    #[serde(rename = "klog")]
    KLog,
    #[serde(rename = "kset")]
    KSet,
    #[serde(rename = "set-assoc")]
    SetAssoc,
    /// FairyWREN's log.
    #[serde(rename = "fwlog")]
    FwLog,
    /// FairyWREN's set store: the hot subsets (every set write).
    #[serde(rename = "fwsets")]
    FwSets,
    /// FairyWREN's set store: the cold subsets (every `cold_every`-th set write).
    #[serde(rename = "fwcold")]
    FwCold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartHandle {
    pub part: EnginePart,
    pub handle: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    #[serde(deserialize_with = "de_stage_name")]
    pub name: String,
    #[serde(deserialize_with = "de_opt_name", serialize_with = "ser_opt")]
    pub owner: Option<String>,
    pub engine: CacheEngine,
    /// The size to install now.
    #[serde(deserialize_with = "de_size")]
    pub size_bytes: u64,
    pub write_mode: WriteMode,
    pub eviction: Eviction,
    #[serde(deserialize_with = "de_max_dirty")]
    pub max_dirty_bytes: u64,
    /// The agent's device a flash engine lives on; `None`: the agent's first.
    #[serde(deserialize_with = "de_opt_name", serialize_with = "ser_opt")]
    pub device: Option<String>,
    #[serde(deserialize_with = "de_placement")]
    pub placement: Vec<PartHandle>,
    /// A second-level cache stage this stage's misses go through.
    #[serde(deserialize_with = "de_opt_stage_name", serialize_with = "ser_opt")]
    pub next: Option<String>,
    /// Server level of a two-level cache: directories, relative to the root of the agent's
    /// forwarding server (`--serve-root`), whose forwarded reads this stage caches in front of
    /// the server's store ("" is the whole root). `None` (absent): a stage of the FUSE switch.
    #[serde(
        default,
        deserialize_with = "de_serves",
        skip_serializing_if = "Option::is_none"
    )]
    pub serves: Option<Vec<String>>,
    /// Server level only: exclusive of level 1 (Moirai's global LRU). Reads from a level 1
    /// that demotes (a DRAM stage in front of a remote endpoint) neither fill it nor stay in
    /// it (a hit moves the block up); it holds the clean blocks level 1 evicts and demotes to
    /// it instead (`remote/frame.rs`, `Op::Demote`). Other readers' reads fill it as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
}

/// Most directories one server-level cache stage serves.
pub const MAX_SERVES: usize = 64;

/// Why `dir` is not a directory relative to a server's root ("" or `a/b`, no `.`, `..` or
/// empty segment, at most 1024 characters), or `None` if it is one.
pub fn serve_dir_error(dir: &str) -> Option<String> {
    if dir.is_empty() {
        return None;
    }
    if dir.len() > 1024
        || dir.chars().any(|c| c.is_ascii_control())
        || dir
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Some(format!(
            "serves {dir:?}: expected a relative directory (a/b: no '.', '..' or empty segment, no control character, at most 1024 characters)"
        ));
    }
    None
}

fn de_serves<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let Some(v) = Option::<Vec<String>>::deserialize(d)? else {
        return Ok(None);
    };
    if v.is_empty() || v.len() > MAX_SERVES {
        return Err(D::Error::custom(format!(
            "serves: {} directories, expected 1 to {MAX_SERVES}",
            v.len()
        )));
    }
    if let Some(why) = v.iter().find_map(|d| serve_dir_error(d)) {
        return Err(D::Error::custom(why));
    }
    Ok(Some(v))
}

impl CacheConfig {
    /// The handle `part` writes with (0 when the broker gave it none).
    pub fn handle(&self, part: EnginePart) -> u16 {
        self.placement
            .iter()
            .find(|p| p.part == part)
            .map_or(0, |p| p.handle)
    }

    /// Whether a live stage built from `self` can become `other` by a resize alone (only the
    /// size differs); any other change builds a new stage.
    pub fn same_but_size(&self, other: &CacheConfig) -> bool {
        CacheConfig {
            size_bytes: other.size_bytes,
            ..self.clone()
        } == *other
    }

    /// [`StageConfig::change_to`] of cache stages (the server level reconciles these alone).
    pub fn change_to(&self, new: &CacheConfig) -> StageChange {
        if self == new {
            StageChange::Keep
        } else if self.same_but_size(new) {
            StageChange::Resize {
                from: self.size_bytes,
                to: new.size_bytes,
            }
        } else {
            StageChange::Rebuild
        }
    }
}

/// A tenant's class in the host's IO scheduler (dmClock: reservation, weight, limit) and its
/// limits. Kept as the `ratelimit` kind, which it extends: a stage with limits alone is what
/// it always was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawRateLimit")]
pub struct RateLimitConfig {
    pub name: String,
    #[serde(serialize_with = "ser_opt")]
    pub owner: Option<String>,
    #[serde(serialize_with = "ser_opt")]
    pub iops: Option<u64>,
    #[serde(serialize_with = "ser_opt")]
    pub bytes_per_s: Option<u64>,
    /// Bytes/s reserved: served ahead of every weight while the stage's IO waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes_per_s: Option<u64>,
    /// The weight class of what reservations leave. Absent: normal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

/// A qos stage's priority: its weight in the IO scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    Normal,
    Low,
}

/// Deserialized first, then checked for the cross-field rules (something is set; a
/// reservation within the byte limit).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    #[serde(deserialize_with = "de_stage_name")]
    name: String,
    #[serde(deserialize_with = "de_opt_name")]
    owner: Option<String>,
    #[serde(deserialize_with = "de_iops")]
    iops: Option<u64>,
    #[serde(deserialize_with = "de_bytes_per_s")]
    bytes_per_s: Option<u64>,
    #[serde(default, deserialize_with = "de_min_bytes_per_s")]
    min_bytes_per_s: Option<u64>,
    #[serde(default)]
    priority: Option<Priority>,
}

fn de_min_bytes_per_s<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_opt_bounded(d, "min_bytes_per_s", MAX_BYTES)
}

impl TryFrom<RawRateLimit> for RateLimitConfig {
    type Error = String;
    fn try_from(r: RawRateLimit) -> Result<Self, String> {
        if r.iops.is_none()
            && r.bytes_per_s.is_none()
            && r.min_bytes_per_s.is_none()
            && r.priority.is_none()
        {
            return Err(format!(
                "ratelimit stage {:?}: set iops, bytes_per_s, min_bytes_per_s or priority",
                r.name
            ));
        }
        if let (Some(min), Some(max)) = (r.min_bytes_per_s, r.bytes_per_s) {
            if min > max {
                return Err(format!(
                    "ratelimit stage {:?}: min_bytes_per_s {min} is above bytes_per_s {max}",
                    r.name
                ));
            }
        }
        Ok(RateLimitConfig {
            name: r.name,
            owner: r.owner,
            iops: r.iops,
            bytes_per_s: r.bytes_per_s,
            min_bytes_per_s: r.min_bytes_per_s,
            priority: r.priority,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    #[serde(deserialize_with = "de_stage_name")]
    pub name: String,
    #[serde(deserialize_with = "de_opt_name", serialize_with = "ser_opt")]
    pub owner: Option<String>,
    /// Where the log lives: on this host, or under the root of `remote`'s server.
    #[serde(deserialize_with = "de_dir")]
    pub dir: String,
    /// `tcp://HOST:PORT`: the log lives on that agent's `lachesis-fs serve` (tail-latency
    /// forwarding: writes of a slow endpoint's tenant are appended to a less loaded one).
    #[serde(
        default,
        deserialize_with = "de_remote",
        skip_serializing_if = "Option::is_none"
    )]
    pub remote: Option<String>,
    /// Set: the log copies what it holds back to the rest of its route at this rate
    /// (reclaim), then holds nothing. None: it holds its data.
    #[serde(
        default,
        deserialize_with = "de_reclaim",
        skip_serializing_if = "Option::is_none"
    )]
    pub reclaim_bytes_per_s: Option<u64>,
}

impl LogConfig {
    /// A log stage that holds its data (on this host).
    pub fn local(name: &str, owner: Option<&str>, dir: &str) -> Self {
        LogConfig {
            name: name.into(),
            owner: owner.map(str::to_string),
            dir: dir.into(),
            remote: None,
            reclaim_bytes_per_s: None,
        }
    }

    /// Whether a live log built from `self` can become `other` by changing its reclaim rate
    /// alone (the log and its data stay).
    pub fn same_but_reclaim(&self, other: &LogConfig) -> bool {
        LogConfig {
            reclaim_bytes_per_s: other.reclaim_bytes_per_s,
            ..self.clone()
        } == *other
    }
}

fn de_reclaim<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_opt_bounded(d, "reclaim_bytes_per_s", MAX_BYTES)
}

/// `tcp://HOST:PORT` with a port in 1..65535 and nothing after it.
fn de_remote<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let Some(s) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let ok = s.strip_prefix("tcp://").is_some_and(|a| {
        a.rsplit_once(':').is_some_and(|(h, p)| {
            !h.is_empty() && !h.contains('/') && p.parse::<u16>().is_ok_and(|p| p > 0)
        })
    });
    if ok && s.len() <= 256 {
        Ok(Some(s))
    } else {
        Err(D::Error::custom(format!(
            "remote {s:?}: expected tcp://HOST:PORT with a port in 1..65535"
        )))
    }
}

/// `None` as `null` (the schema requires these fields, nullable).
fn ser_opt<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(v),
        None => s.serialize_none(),
    }
}

/// Checks a desired state's stages as a set: unique names, `next` naming a cache stage that
/// exists and no cycle through `next`.
pub fn check_stages(stages: &[StageConfig]) -> Result<(), String> {
    use std::collections::HashMap;
    let mut by_name: HashMap<&str, &StageConfig> = HashMap::new();
    for s in stages {
        if by_name.insert(s.name(), s).is_some() {
            return Err(format!("stage {:?} is declared twice", s.name()));
        }
    }
    for s in stages {
        let StageConfig::Cache(c) = s else { continue };
        if c.exclusive && c.serves.is_none() {
            return Err(format!(
                "stage {:?}: exclusive is for a server-level stage (one with serves)",
                c.name
            ));
        }
        let mut seen = vec![c.name.as_str()];
        let mut at = c;
        while let Some(next) = &at.next {
            match by_name.get(next.as_str()) {
                Some(StageConfig::Cache(n)) => {
                    if seen.contains(&n.name.as_str()) {
                        return Err(format!(
                            "stage {:?}: next stages form a cycle ({} -> {})",
                            c.name,
                            seen.join(" -> "),
                            n.name
                        ));
                    }
                    seen.push(&n.name);
                    at = n;
                }
                Some(_) => {
                    return Err(format!(
                        "stage {:?}: next {next:?} is not a cache stage",
                        at.name
                    ))
                }
                None => {
                    return Err(format!(
                        "stage {:?}: next {next:?} is not a declared stage",
                        at.name
                    ))
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(name: &str, next: Option<&str>) -> StageConfig {
        StageConfig::Cache(CacheConfig {
            name: name.into(),
            owner: Some("alpha".into()),
            engine: CacheEngine::Loc,
            size_bytes: 1 << 20,
            write_mode: WriteMode::Through,
            eviction: Eviction::Lru,
            max_dirty_bytes: 1 << 20,
            device: None,
            placement: vec![PartHandle {
                part: EnginePart::Loc,
                handle: 3,
            }],
            next: next.map(String::from),
            serves: None,
            exclusive: false,
        })
    }

    #[test]
    fn stage_names() {
        for ok in ["cache/alpha", "a", "qos/gold-1", "a/b/c"] {
            assert!(is_valid_stage_name(ok), "{ok}");
        }
        for bad in ["", "/a", "a/", "Cache", "a b", &"a".repeat(129)] {
            assert!(!is_valid_stage_name(bad), "{bad}");
        }
    }

    #[test]
    fn stage_sets_refuse_duplicates_dangling_and_cyclic_next() {
        assert!(check_stages(&[cache("c/a", Some("c/b")), cache("c/b", None)]).is_ok());
        let e = check_stages(&[cache("c/a", None), cache("c/a", None)]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = check_stages(&[cache("c/a", Some("c/x"))]).unwrap_err();
        assert!(e.contains("not a declared stage"), "{e}");
        let e = check_stages(&[cache("c/a", Some("c/b")), cache("c/b", Some("c/a"))]).unwrap_err();
        assert!(e.contains("cycle"), "{e}");
    }

    #[test]
    fn log_stages_take_a_remote_and_a_reclaim_rate() {
        let l: StageConfig = serde_json::from_str(
            r#"{"kind":"log","name":"fwd/a","owner":"a","dir":"/fwd/a","remote":"tcp://10.0.0.2:7070","reclaim_bytes_per_s":1048576}"#,
        )
        .unwrap();
        let StageConfig::Log(l) = l else {
            unreachable!()
        };
        assert_eq!(l.remote.as_deref(), Some("tcp://10.0.0.2:7070"));
        assert!(l.same_but_reclaim(&LogConfig {
            reclaim_bytes_per_s: None,
            ..l.clone()
        }));
        assert!(!l.same_but_reclaim(&LogConfig {
            remote: None,
            ..l.clone()
        }));
        // Without the new fields a log stage reads as before and writes them out as absent.
        let old = LogConfig::local("log/a", None, "/var/log/a");
        let text = serde_json::to_string(&StageConfig::Log(old.clone())).unwrap();
        assert!(!text.contains("remote"), "{text}");
        assert_eq!(
            serde_json::from_str::<StageConfig>(&text).unwrap(),
            StageConfig::Log(old)
        );
        for (bad, why) in [
            (r#""remote":"10.0.0.2:7070""#, "tcp://HOST:PORT"),
            (r#""remote":"tcp://h:0""#, "tcp://HOST:PORT"),
            (r#""remote":"tcp://h:70/dir""#, "tcp://HOST:PORT"),
            (r#""reclaim_bytes_per_s":0"#, "reclaim_bytes_per_s"),
        ] {
            let text = format!(r#"{{"kind":"log","name":"fwd/a","owner":null,"dir":"/a",{bad}}}"#);
            let e = serde_json::from_str::<StageConfig>(&text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn server_level_caches_name_relative_directories() {
        let base = r#"{"kind":"cache","name":"cache/l2","owner":"a","engine":"dram","size_bytes":1048576,"write_mode":"through","eviction":"lru","max_dirty_bytes":4096,"device":null,"placement":[],"next":null"#;
        let c: StageConfig =
            serde_json::from_str(&format!(r#"{base},"serves":["tenants/a",""]}}"#)).unwrap();
        let StageConfig::Cache(c) = c else {
            unreachable!()
        };
        assert_eq!(c.serves, Some(vec!["tenants/a".to_string(), String::new()]));
        // Without the field a cache stage is the switch's, and is written out without it.
        let plain: StageConfig = serde_json::from_str(&format!("{base}}}")).unwrap();
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("serves"), "{text}");
        for (bad, why) in [
            (r#"["../etc"]"#, "relative directory"),
            (r#"["/abs"]"#, "relative directory"),
            (r#"["a//b"]"#, "relative directory"),
            ("[]", "1 to"),
        ] {
            let e = serde_json::from_str::<StageConfig>(&format!(r#"{base},"serves":{bad}}}"#))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // exclusive: absent reads as false and is written out only when set; only a
        // server-level stage may be exclusive.
        let l2: StageConfig =
            serde_json::from_str(&format!(r#"{base},"serves":["t"],"exclusive":true}}"#)).unwrap();
        let StageConfig::Cache(ref c2) = l2 else {
            unreachable!()
        };
        assert!(c2.exclusive && !c.exclusive);
        assert!(serde_json::to_string(&l2)
            .unwrap()
            .contains(r#""exclusive":true"#));
        check_stages(&[l2]).unwrap();
        let l1: StageConfig =
            serde_json::from_str(&format!(r#"{base},"exclusive":true}}"#)).unwrap();
        let e = check_stages(&[l1]).unwrap_err();
        assert!(e.contains("exclusive") && e.contains("serves"), "{e}");
    }

    #[test]
    fn handles_and_resizes() {
        let StageConfig::Cache(a) = cache("c/a", None) else {
            unreachable!()
        };
        assert_eq!(a.handle(EnginePart::Loc), 3);
        assert_eq!(a.handle(EnginePart::KSet), 0);
        assert_eq!(a.handle(EnginePart::FwCold), 0);
        let bigger = CacheConfig {
            size_bytes: 2 << 20,
            ..a.clone()
        };
        assert!(a.same_but_size(&bigger));
        let other_mode = CacheConfig {
            write_mode: WriteMode::Back,
            ..a.clone()
        };
        assert!(!a.same_but_size(&other_mode));
    }

    #[test]
    fn a_qos_stage_needs_something_to_enforce_and_a_reservation_within_its_limit() {
        let de = |v: serde_json::Value| serde_json::from_value::<StageConfig>(v);
        let base = serde_json::json!({"kind": "ratelimit", "name": "qos/a", "owner": null,
                                      "iops": null, "bytes_per_s": null});
        let e = de(base.clone()).unwrap_err().to_string();
        assert!(e.contains("min_bytes_per_s or priority"), "{e}");
        let mut low = base.clone();
        low["priority"] = "low".into();
        let StageConfig::RateLimit(r) = de(low).unwrap() else {
            unreachable!()
        };
        assert_eq!(r.priority, Some(Priority::Low));
        let mut over = base;
        over["bytes_per_s"] = 1000.into();
        over["min_bytes_per_s"] = 2000.into();
        let e = de(over).unwrap_err().to_string();
        assert!(
            e.contains("min_bytes_per_s 2000 is above bytes_per_s 1000"),
            "{e}"
        );
    }
}
