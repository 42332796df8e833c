//! The FUSE switch's way to the controller (`lachesis_fs::detour::ControllerLink`) over the
//! Redis bus: held IO headers go out on `lachesis:agent:{host_id}:detours` as `detour-request`, verdicts
//! come back on `lachesis:detour-verdicts:{host_id}` as `detour-verdict`
//! (`api-schemas/bus/detour-*.schema.json`).
//!
//! The FUSE threads never touch Redis: `ask` and `copy` put the message on a channel and
//! return; the held IO waits in `lachesis_fs::detour` on its own condition variable. Two
//! tasks on the agent's runtime do the IO: one appends the requests (retrying while Redis is
//! away, dropping what is older than the switch's deadline: its IO has failed already), one
//! follows the verdict stream and hands each verdict to the IO waiting for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lachesis_fs::detour::{ControllerLink, DetourHeader, Reply, Verdict};
use lachesis_switch::names::de_name;
use lachesis_switch::Op;
use redis::streams::StreamReadReply;
use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::bus::{is_valid_host_id, is_valid_traceparent, keys, schema_tag, Timestamp};

/// Requests kept in the host's detour stream ([`keys::detours`], `XADD MAXLEN ~`).
const REQUESTS_MAXLEN: usize = 10_000;

/// Stream: controller → agent, [`DetourVerdict`].
pub fn verdicts_key(host_id: &str) -> String {
    format!("lachesis:detour-verdicts:{host_id}")
}

schema_tag!(
    /// `"lachesis.detour-request/v1"`
    RequestSchema = "lachesis.detour-request/v1"
);
schema_tag!(
    /// `"lachesis.detour-verdict/v1"`
    VerdictSchema = "lachesis.detour-verdict/v1"
);

fn de_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    let ok = (1..=64).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
    if ok {
        Ok(s)
    } else {
        Err(D::Error::custom(format!(
            "invalid id {s:?}: expected 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
        )))
    }
}

fn de_host<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if is_valid_host_id(&s) {
        Ok(s)
    } else {
        Err(D::Error::custom(format!("invalid host_id {s:?}")))
    }
}

fn de_trace<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<String>::deserialize(d)?;
    match &v {
        Some(s) if !is_valid_traceparent(s) => {
            Err(D::Error::custom(format!("invalid traceparent {s:?}")))
        }
        _ => Ok(v),
    }
}

fn de_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    lachesis_switch::names::check_len("text", String::deserialize(d)?, 1, 4096)
}

fn de_tenant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    struct N(#[serde(deserialize_with = "de_name")] String);
    Ok(Option::<N>::deserialize(d)?.map(|n| n.0))
}

fn de_errno<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    let v = Option::<i32>::deserialize(d)?;
    match v {
        Some(e) if !(1..=4095).contains(&e) => {
            Err(D::Error::custom(format!("errno {e} is outside 1..=4095")))
        }
        _ => Ok(v),
    }
}

fn de_reason<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| lachesis_switch::names::check_len("reason", s, 0, 1024))
        .transpose()
}

/// The IO header of a [`DetourRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireHeader {
    #[serde(deserialize_with = "de_tenant")]
    pub tenant: Option<String>,
    pub op: Op,
    #[serde(deserialize_with = "de_text")]
    pub path: String,
    pub offset: u64,
    pub length: u64,
}

/// `lachesis.detour-request/v1`: appended to [`keys::detours`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetourRequest {
    pub schema: RequestSchema,
    #[serde(deserialize_with = "de_id")]
    pub id: String,
    #[serde(deserialize_with = "de_host")]
    pub host_id: String,
    pub generation: u64,
    #[serde(deserialize_with = "de_name")]
    pub rule: String,
    #[serde(deserialize_with = "de_text")]
    pub target: String,
    pub hold: bool,
    pub header: WireHeader,
    pub sent_at: Timestamp,
    #[serde(deserialize_with = "de_trace")]
    pub traceparent: Option<String>,
}

/// proceed or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictKind {
    Proceed,
    Deny,
}

/// `lachesis.detour-verdict/v1`: read from [`verdicts_key`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawVerdict")]
pub struct DetourVerdict {
    pub schema: VerdictSchema,
    pub id: String,
    pub host_id: String,
    pub verdict: VerdictKind,
    pub errno: Option<i32>,
    pub ttl_ms: Option<u64>,
    pub reason: Option<String>,
    pub decided_at: Timestamp,
    pub traceparent: Option<String>,
}

/// The fields as they arrive; [`DetourVerdict`] adds the checks across fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVerdict {
    schema: VerdictSchema,
    #[serde(deserialize_with = "de_id")]
    id: String,
    #[serde(deserialize_with = "de_host")]
    host_id: String,
    verdict: VerdictKind,
    #[serde(deserialize_with = "de_errno")]
    errno: Option<i32>,
    ttl_ms: Option<u64>,
    #[serde(deserialize_with = "de_reason")]
    reason: Option<String>,
    decided_at: Timestamp,
    #[serde(deserialize_with = "de_trace")]
    traceparent: Option<String>,
}

impl TryFrom<RawVerdict> for DetourVerdict {
    type Error = String;

    fn try_from(r: RawVerdict) -> Result<Self, String> {
        match (r.verdict, r.errno, r.ttl_ms) {
            (VerdictKind::Deny, None, _) => return Err("deny needs an errno".into()),
            (VerdictKind::Deny, _, Some(_)) => return Err("deny takes no ttl_ms".into()),
            (VerdictKind::Proceed, Some(_), _) => return Err("proceed takes no errno".into()),
            _ => {}
        }
        Ok(DetourVerdict {
            schema: r.schema,
            id: r.id,
            host_id: r.host_id,
            verdict: r.verdict,
            errno: r.errno,
            ttl_ms: r.ttl_ms,
            reason: r.reason,
            decided_at: r.decided_at,
            traceparent: r.traceparent,
        })
    }
}

impl DetourVerdict {
    /// What the switch does with it.
    pub fn to_verdict(&self) -> Verdict {
        match self.verdict {
            VerdictKind::Proceed => Verdict::Proceed {
                ttl: self.ttl_ms.map(Duration::from_millis),
            },
            // Checked on deserialization; EIO if built by hand without one.
            VerdictKind::Deny => Verdict::Deny {
                errno: self.errno.unwrap_or(EIO),
            },
        }
    }
}

const EIO: i32 = 5;

struct Outgoing {
    json: String,
    made: Instant,
}

/// The Redis link of one agent.
pub struct RedisLink {
    host_id: String,
    /// Makes request ids unique across agent restarts.
    prefix: String,
    next: AtomicU64,
    generation: Arc<AtomicU64>,
    pending: Arc<Mutex<HashMap<String, (Reply, Instant)>>>,
    tx: mpsc::UnboundedSender<Outgoing>,
}

impl RedisLink {
    /// Starts the two tasks on the current tokio runtime. `deadline`: the switch's; requests
    /// not sent by then are dropped. `generation`: the agent's applied generation, sent along.
    pub fn start(
        client: redis::Client,
        host_id: &str,
        deadline: Duration,
        generation: Arc<AtomicU64>,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let link = Arc::new(RedisLink {
            host_id: host_id.to_string(),
            prefix: format!("{host_id}.{started}"),
            next: AtomicU64::new(1),
            generation,
            pending: Arc::new(Mutex::new(HashMap::new())),
            tx,
        });
        tokio::spawn(send_loop(
            client.clone(),
            keys::detours(host_id),
            rx,
            deadline,
        ));
        tokio::spawn(verdict_loop(
            client,
            host_id.to_string(),
            link.pending.clone(),
            deadline,
        ));
        link
    }

    fn request(&self, header: DetourHeader) -> DetourRequest {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        DetourRequest {
            schema: RequestSchema,
            id: format!("{}.{n}", self.prefix),
            host_id: self.host_id.clone(),
            generation: self.generation.load(Ordering::Relaxed),
            rule: header.rule,
            target: header.target,
            hold: header.hold,
            header: WireHeader {
                tenant: header.tenant,
                op: header.op,
                path: header.path,
                offset: header.offset,
                length: header.length,
            },
            sent_at: Timestamp::now(),
            // Called in the held IO's detour span (lachesis_fs::detour), whose trace goes on at
            // the controller; with traces off, a trace id of its own.
            traceparent: crate::otel::traceparent_of(&tracing::Span::current())
                .or_else(|| Some(new_traceparent(&self.prefix, n))),
        }
    }

    fn send(&self, req: &DetourRequest) {
        match serde_json::to_string(req) {
            Ok(json) => {
                // Fails only when the runtime is gone (shutdown): the IO then times out.
                let _ = self.tx.send(Outgoing {
                    json,
                    made: Instant::now(),
                });
            }
            Err(e) => error!(error = %e, "cannot encode a detour request"),
        }
    }
}

/// A fresh W3C trace context for one request: the controller's span and the verdict carry it.
fn new_traceparent(prefix: &str, n: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let h = prefix.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    format!("00-{nanos:016x}{h:016x}-{:016x}-01", n.max(1))
}

impl ControllerLink for RedisLink {
    fn ask(&self, header: DetourHeader, reply: Reply) {
        let req = self.request(header);
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(req.id.clone(), (reply, Instant::now()));
        self.send(&req);
    }

    fn copy(&self, header: DetourHeader) {
        let req = self.request(header);
        self.send(&req);
    }
}

async fn connect(client: &redis::Client) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let cfg = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
}

async fn send_loop(
    client: redis::Client,
    stream: String,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    deadline: Duration,
) {
    let mut con = None;
    let mut failing = false;
    while let Some(out) = rx.recv().await {
        loop {
            if out.made.elapsed() >= deadline {
                warn!("detour request not sent before the deadline (Redis away); dropped");
                break;
            }
            if con.is_none() {
                con = connect(&client).await.ok();
            }
            let Some(c) = con.as_mut() else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let r: redis::RedisResult<String> = redis::cmd("XADD")
                .arg(&stream)
                .arg("MAXLEN")
                .arg("~")
                .arg(REQUESTS_MAXLEN)
                .arg("*")
                .arg(keys::FIELD)
                .arg(&out.json)
                .query_async(c)
                .await;
            match r {
                Ok(id) => {
                    if failing {
                        info!("detour requests flow again");
                        failing = false;
                    }
                    debug!(entry = %id, "detour request sent");
                    break;
                }
                Err(e) => {
                    if !failing {
                        warn!(error = %e, "cannot send a detour request; retrying");
                        failing = true;
                    }
                    con = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

async fn verdict_loop(
    client: redis::Client,
    host_id: String,
    pending: Arc<Mutex<HashMap<String, (Reply, Instant)>>>,
    deadline: Duration,
) {
    let key = verdicts_key(&host_id);
    // Verdicts older than the agent are for IO of an earlier run: start at the stream's end.
    let mut last: Option<String> = None;
    loop {
        let r = async {
            let mut con = connect(&client).await?;
            if last.is_none() {
                last = Some(crate::runner::stream_end(&mut con, &key).await?);
            }
            loop {
                let reply: Option<StreamReadReply> = redis::cmd("XREAD")
                    .arg("COUNT")
                    .arg(256)
                    .arg("BLOCK")
                    .arg(1000)
                    .arg("STREAMS")
                    .arg(&key)
                    .arg(last.as_deref().unwrap_or("0-0"))
                    .query_async(&mut con)
                    .await?;
                for e in reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids) {
                    last = Some(e.id.clone());
                    let Some(text) = e.get::<String>(keys::FIELD) else {
                        warn!(key = %key, entry = %e.id, "verdict entry without a msg field; skipped");
                        continue;
                    };
                    deliver(&pending, &text);
                }
                // IO whose verdict never came failed at its deadline; forget its reply.
                let horizon = deadline * 4;
                pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|_, (_, t)| t.elapsed() < horizon);
            }
            #[allow(unreachable_code)]
            redis::RedisResult::Ok(())
        }
        .await;
        if let Err(e) = r {
            warn!(key = %key, error = %e, "reading detour verdicts failed; reconnecting");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Hands one verdict to the IO waiting for it.
fn deliver(pending: &Mutex<HashMap<String, (Reply, Instant)>>, text: &str) {
    let v: DetourVerdict = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            warn!(error = %e, "invalid detour verdict; skipped");
            return;
        }
    };
    let waiting = pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&v.id);
    match waiting {
        Some((reply, asked)) => {
            info!(
                id = %v.id, verdict = ?v.verdict, errno = v.errno.unwrap_or(0),
                ttl_ms = v.ttl_ms.unwrap_or(0), waited_ms = asked.elapsed().as_millis() as u64,
                traceparent = v.traceparent.as_deref().unwrap_or("-"),
                "detour verdict"
            );
            reply.answer(v.to_verdict());
        }
        None => debug!(id = %v.id, "verdict for no waiting IO (late or answered); ignored"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_header_and_a_valid_trace_context() {
        let (link, mut rx) = link();
        link.copy(DetourHeader {
            rule: "w".into(),
            target: "approve".into(),
            tenant: None,
            op: Op::Write,
            path: "/d/f".into(),
            offset: 3,
            length: 4,
            hold: false,
        });
        let out = rx.try_recv().unwrap();
        let req: DetourRequest = serde_json::from_str(&out.json).unwrap();
        assert_eq!(
            (req.id.as_str(), req.generation, req.hold),
            ("h1.5.1", 7, false)
        );
        assert_eq!((req.header.offset, req.header.length), (3, 4));
        assert!(is_valid_traceparent(req.traceparent.as_deref().unwrap()));
        assert!(
            link.pending.lock().unwrap().is_empty(),
            "a copy waits for nothing"
        );
    }

    #[test]
    fn a_detour_continues_the_trace_it_is_made_in() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt;
        // Traces on, without an exporter: the spans get real W3C contexts.
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let (link, mut rx) = link();
        let outer = tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!(target: crate::otel::TARGET, "outer");
            let _in = outer.enter();
            lachesis_fs::detour::Detours::new(link.clone(), Duration::from_secs(1)).copy(
                DetourHeader {
                    rule: "r1".into(),
                    target: "readset".into(),
                    tenant: None,
                    op: Op::Write,
                    path: "/d/f".into(),
                    offset: 0,
                    length: 1,
                    hold: false,
                },
            );
            crate::otel::traceparent_of(&outer).unwrap()
        });
        let req: DetourRequest = serde_json::from_str(&rx.try_recv().unwrap().json).unwrap();
        let sent = req.traceparent.unwrap();
        // (trace id, span id)
        let ids = |tp: &str| (tp[3..35].to_string(), tp[36..52].to_string());
        let ((sent_trace, sent_span), (outer_trace, outer_span)) = (ids(&sent), ids(&outer));
        // Same trace; the request names the switch's detour span, a child of `outer`.
        assert_eq!(sent_trace, outer_trace, "{sent} vs {outer}");
        assert_ne!(sent_span, outer_span, "{sent} vs {outer}");
    }

    fn link() -> (Arc<RedisLink>, mpsc::UnboundedReceiver<Outgoing>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Arc::new(RedisLink {
            host_id: "h1".into(),
            prefix: "h1.5".into(),
            next: AtomicU64::new(1),
            generation: Arc::new(AtomicU64::new(7)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            tx,
        });
        (link, rx)
    }

    fn verdict(id: &str, kind: &str, errno: &str) -> String {
        format!(
            r#"{{"schema":"lachesis.detour-verdict/v1","id":"{id}","host_id":"h1","verdict":"{kind}",
            "errno":{errno},"ttl_ms":null,"reason":null,"decided_at":"2026-11-21T10:00:00Z","traceparent":null}}"#
        )
    }

    #[test]
    fn a_verdict_releases_the_held_io_it_names_and_nothing_else() {
        use lachesis_fs::detour::Detours;
        let (link, mut rx) = link();
        // Longer than any test: the held IOs wait for the verdicts this test delivers.
        let detours = Arc::new(Detours::new(link.clone(), Duration::from_secs(3600)));
        let header = |rule: &str| DetourHeader {
            rule: rule.into(),
            target: "readset".into(),
            tenant: Some("db".into()),
            op: Op::Write,
            path: "/d/f".into(),
            offset: 0,
            length: 1,
            hold: true,
        };
        let (d1, d2) = (detours.clone(), detours.clone());
        let a = std::thread::spawn(move || d1.hold(header("a"), 1));
        let b = std::thread::spawn(move || d2.hold(header("b"), 1));
        let ids: Vec<String> = (0..2)
            .map(|_| {
                // A bounded number of polls (a minute's worth) only turns a hang into a failure.
                for _ in 0..30_000 {
                    if let Ok(out) = rx.try_recv() {
                        let req: DetourRequest = serde_json::from_str(&out.json).unwrap();
                        assert!(req.hold);
                        return req.id;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                panic!("no request sent after 30,000 polls");
            })
            .collect();
        // Garbage and verdicts for nobody change nothing: both IOs still wait for theirs
        // (a verdict reaches an IO only by being taken out of `pending`, in `deliver`).
        deliver(&link.pending, "not json");
        deliver(&link.pending, &verdict("h1.5.99", "proceed", "null"));
        let mut waiting: Vec<String> = link.pending.lock().unwrap().keys().cloned().collect();
        waiting.sort();
        let mut asked = ids.clone();
        asked.sort();
        assert_eq!(waiting, asked);
        assert!(!a.is_finished() && !b.is_finished());
        // One IO proceeds, the other is denied: each gets its own verdict.
        for (i, id) in ids.iter().enumerate() {
            let (kind, errno) = if i == 0 {
                ("proceed", "null")
            } else {
                ("deny", "13")
            };
            deliver(&link.pending, &verdict(id, kind, errno));
        }
        let results = [a.join().unwrap(), b.join().unwrap()];
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
        let denied = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert_eq!(denied.raw_os_error(), Some(13));
        assert!(link.pending.lock().unwrap().is_empty());
    }

    #[test]
    fn verdict_fields_are_checked_together() {
        let v = |verdict: &str, errno: &str, ttl: &str| {
            format!(
                r#"{{"schema":"lachesis.detour-verdict/v1","id":"a.1","host_id":"h","verdict":"{verdict}",
                "errno":{errno},"ttl_ms":{ttl},"reason":null,"decided_at":"2026-11-21T10:00:00Z","traceparent":null}}"#
            )
        };
        let ok: DetourVerdict = serde_json::from_str(&v("deny", "13", "null")).unwrap();
        assert_eq!(ok.to_verdict(), Verdict::Deny { errno: 13 });
        let ok: DetourVerdict = serde_json::from_str(&v("proceed", "null", "250")).unwrap();
        assert_eq!(
            ok.to_verdict(),
            Verdict::Proceed {
                ttl: Some(Duration::from_millis(250))
            }
        );
        assert!(serde_json::from_str::<DetourVerdict>(&v("deny", "null", "null")).is_err());
        assert!(serde_json::from_str::<DetourVerdict>(&v("proceed", "5", "null")).is_err());
        assert!(serde_json::from_str::<DetourVerdict>(&v("deny", "0", "null")).is_err());
    }
}
