//! The `declared-io` bus message (`api-schemas/bus/declared-io.schema.json`): every declared
//! job of one host, as the controller keeps it in `lachesis:agent:{host}:declared-io`, and
//! what the agent reports back per job in its telemetry (`declared_io`).
//!
//! Deserialization enforces the schema (unknown fields refused, names, paths and ranges
//! checked), so a job that reaches the planner is well-formed; whether its files exist under
//! a mount of this agent is the planner's question.

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use lachesis_switch::names::{de_name, is_valid_name};
use lachesis_switch::stage::host_path_error;

/// Most jobs one host carries.
pub const MAX_JOBS: usize = 256;
/// Most file ranges one job declares.
pub const MAX_FILES: usize = 1024;
/// Largest offset, length or rate (1 PiB), as for stages.
pub const MAX_BYTES: u64 = 1 << 50;

/// The message's `schema`.
pub const SCHEMA: &str = "lachesis.declared-io/v1";

/// Every declared job of one host; a job absent from a newer message is cancelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredIo {
    #[serde(deserialize_with = "de_schema")]
    pub schema: String,
    pub host_id: String,
    /// Grows with every change of the host's jobs: an older message is ignored.
    #[serde(deserialize_with = "de_version")]
    pub version: u64,
    #[serde(deserialize_with = "de_jobs")]
    pub jobs: Vec<JobSpec>,
}

/// How the dispatcher spends a job's slack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pace {
    /// Read at the rate that finishes a little before the deadline: the slack before it is
    /// left to foreground reads, which cover the job for free.
    #[default]
    Deadline,
    /// Read at the whole budget now (the thesis's planner: every quantum's budget is spent
    /// while declarations are outstanding).
    Budget,
}

/// One declared job: what to read (file ranges on the host) and by when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    #[serde(deserialize_with = "de_name")]
    pub id: String,
    /// The tenant whose data it reads.
    #[serde(deserialize_with = "de_name")]
    pub tenant: String,
    #[serde(deserialize_with = "de_files")]
    pub files: Vec<FileRange>,
    /// RFC 3339.
    #[serde(deserialize_with = "de_deadline")]
    pub deadline: String,
    #[serde(default)]
    pub pace: Pace,
    /// A paused job reads nothing itself; foreground reads still count for it.
    #[serde(default)]
    pub paused: bool,
    /// This job's own cap under the agent's budget; null: the budget alone.
    #[serde(default, deserialize_with = "de_rate")]
    pub rate_bytes_per_s: Option<u64>,
}

impl JobSpec {
    /// The deadline as a time (checked when deserialized).
    pub fn deadline_at(&self) -> OffsetDateTime {
        OffsetDateTime::parse(&self.deadline, &Rfc3339).unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }
}

/// `length` bytes of the file at `path` from `offset`; null length: to the file's end (its
/// size when the agent accepts the job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRange {
    #[serde(deserialize_with = "de_path")]
    pub path: String,
    #[serde(default, deserialize_with = "de_offset")]
    pub offset: u64,
    #[serde(default, deserialize_with = "de_rate")]
    pub length: Option<u64>,
}

/// Where a job is, as the agent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    Paused,
    Done,
    /// Not runnable here (a path under no mount, a file that cannot be read); see `error`.
    Failed,
}

/// One job's progress in telemetry; cumulative since the agent accepted the job.
/// `dispatched_bytes + foreground_bytes + shared_bytes` is what has been covered, and equals
/// `bytes_declared` once done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobReport {
    #[serde(deserialize_with = "de_name")]
    pub id: String,
    pub state: JobState,
    pub bytes_declared: u64,
    /// Read from the backing files by the dispatcher for this job.
    pub dispatched_bytes: u64,
    /// Covered by foreground reads through the switch.
    pub foreground_bytes: u64,
    /// Covered by the dispatcher's reads for another job declaring the same bytes.
    pub shared_bytes: u64,
    pub error: Option<String>,
    /// Once done: each range's checksum (CRC-32 of the CRC-32s of its 64 KiB blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<FileDigest>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDigest {
    pub path: String,
    pub offset: u64,
    pub length: u64,
    pub crc32: u32,
}

fn de_schema<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s != SCHEMA {
        return Err(D::Error::custom(format!(
            "schema must be {SCHEMA:?}, got {s:?}"
        )));
    }
    Ok(s)
}

fn de_version<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v == 0 {
        return Err(D::Error::custom("version: must be at least 1"));
    }
    Ok(v)
}

fn de_jobs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<JobSpec>, D::Error> {
    let jobs = Vec::<JobSpec>::deserialize(d)?;
    if jobs.len() > MAX_JOBS {
        return Err(D::Error::custom(format!(
            "jobs: {} jobs, at most {MAX_JOBS}",
            jobs.len()
        )));
    }
    let mut ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(D::Error::custom(format!("jobs: id {:?} twice", w[0])));
    }
    Ok(jobs)
}

fn de_files<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<FileRange>, D::Error> {
    let files = Vec::<FileRange>::deserialize(d)?;
    if files.is_empty() || files.len() > MAX_FILES {
        return Err(D::Error::custom(format!(
            "files: {} ranges, expected 1..={MAX_FILES}",
            files.len()
        )));
    }
    Ok(files)
}

fn de_deadline<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    OffsetDateTime::parse(&s, &Rfc3339)
        .map_err(|e| D::Error::custom(format!("deadline {s:?}: not RFC 3339: {e}")))?;
    Ok(s)
}

fn de_path<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    match host_path_error(&s) {
        Some(why) => Err(D::Error::custom(format!("path {why}"))),
        None => Ok(s),
    }
}

fn de_offset<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v > MAX_BYTES {
        return Err(D::Error::custom(format!(
            "offset: {v} is outside 0..={MAX_BYTES}"
        )));
    }
    Ok(v)
}

fn de_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<u64>::deserialize(d)? {
        Some(v) if v == 0 || v > MAX_BYTES => {
            Err(D::Error::custom(format!("{v} is outside 1..={MAX_BYTES}")))
        }
        v => Ok(v),
    }
}

/// Whether `s` may name a job (the tenant and rule name pattern).
pub fn is_valid_job_id(s: &str) -> bool {
    is_valid_name(s)
}
