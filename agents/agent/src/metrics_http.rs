//! `--metrics-listen ADDR`: Prometheus metrics at `http://ADDR/metrics`
//! ([`crate::metrics_exposition`] renders them).
//!
//! HTTP/1 by `hyper` on the agent's own tokio runtime: hyper is already in the agent's tree (the
//! OTLP exporter's HTTP client is built on it), and one connection task per scraper costs
//! nothing while nobody scrapes. Each scrape also asks Redis (the agent's own connection,
//! bounded by a short timeout) for the desired key's generation and the inbox entries beyond
//! the last one the agent read; when Redis does not answer, the scrape still succeeds, with
//! `lachesis_bus_up 0` and those two left out.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamRangeReply;
use redis::AsyncConnectionConfig;
use tokio::sync::{watch, Mutex};
use tracing::{debug, info, warn};

use crate::bus::keys;
use crate::bus_lag::BusProgress;
use crate::metrics_exposition::{render, BusLag, CONTENT_TYPE as OPENMETRICS};
use crate::state::Applied;
use crate::telemetry::LatestReport;

/// Longest a scrape waits for Redis.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The inbox is trimmed to about 1,000 entries by the controller; a backlog is counted up to this.
const BACKLOG_CAP: usize = 10_000;

/// `--metrics-listen`: an `IP:PORT` to listen on (port 0: any free one, logged).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!("{s:?} is not an address to listen on: expected IP:PORT, e.g. 127.0.0.1:9464")
    })
}

/// Binds `addr` (before the agent touches the bus, so a taken port stops it with a clear error).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// What a scrape reads.
pub struct Sources {
    pub host_id: String,
    pub latest: Arc<LatestReport>,
    pub progress: Arc<BusProgress>,
    pub applied: watch::Receiver<Applied>,
    pub client: redis::Client,
    con: Mutex<Option<MultiplexedConnection>>,
}

impl Sources {
    pub fn new(
        host_id: String,
        latest: Arc<LatestReport>,
        progress: Arc<BusProgress>,
        applied: watch::Receiver<Applied>,
        client: redis::Client,
    ) -> Self {
        Sources {
            host_id,
            latest,
            progress,
            applied,
            client,
            con: Mutex::new(None),
        }
    }

    /// The text of one scrape.
    pub async fn scrape(&self) -> String {
        let mut bus = BusLag {
            since_last_read_s: self.progress.since_last_read().map(|d| d.as_secs_f64()),
            applied_generation: self.applied.borrow().generation,
            ..Default::default()
        };
        match tokio::time::timeout(PROBE_TIMEOUT, self.probe()).await {
            Ok(Ok((desired, backlog))) => {
                bus.redis_up = true;
                bus.desired_generation = desired;
                bus.inbox_backlog = backlog;
            }
            Ok(Err(e)) => {
                debug!(error = %e, "metrics: bus probe failed");
                *self.con.lock().await = None;
            }
            Err(_) => {
                debug!("metrics: bus probe timed out");
                *self.con.lock().await = None;
            }
        }
        render(&self.host_id, self.latest.get(), bus)
    }

    /// (generation in the desired key, inbox entries after the last one read).
    async fn probe(&self) -> anyhow::Result<(Option<u64>, Option<u64>)> {
        let mut guard = self.con.lock().await;
        if guard.is_none() {
            let cfg = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(PROBE_TIMEOUT))
                .set_response_timeout(Some(PROBE_TIMEOUT));
            *guard = Some(
                self.client
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await?,
            );
        }
        let con = guard.as_mut().expect("connected above");
        let text: Option<String> = redis::cmd("GET")
            .arg(keys::desired(&self.host_id))
            .query_async(con)
            .await?;
        #[derive(serde::Deserialize)]
        struct Generation {
            generation: u64,
        }
        let desired = text
            .and_then(|t| serde_json::from_str::<Generation>(&t).ok())
            .map(|g| g.generation);
        let backlog = match self.progress.inbox_id() {
            None => None,
            Some(id) => {
                let after: StreamRangeReply = redis::cmd("XRANGE")
                    .arg(keys::inbox(&self.host_id))
                    .arg(format!("({id}"))
                    .arg("+")
                    .arg("COUNT")
                    .arg(BACKLOG_CAP)
                    .query_async(con)
                    .await?;
                Some(after.ids.len() as u64)
            }
        };
        Ok((desired, backlog))
    }
}

/// Serve `GET /metrics` on `listener` until the runtime stops.
pub fn spawn(
    listener: TcpListener,
    sources: Arc<Sources>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    info!(addr = %listener.local_addr()?, "serving Prometheus metrics at /metrics");
    Ok(tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors and the like: the scraper retries.
                    warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let sources = sources.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let sources = sources.clone();
                    async move { Ok::<_, Infallible>(respond(&req, &sources).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await
                {
                    debug!(error = %e, "metrics: connection ended");
                }
            });
        }
    }))
}

async fn respond(req: &Request<Incoming>, sources: &Sources) -> Response<Full<Bytes>> {
    let reply = |status, ctype: &str, body: String| {
        Response::builder()
            .status(status)
            .header(CONTENT_TYPE, ctype)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    let text = "text/plain; charset=utf-8";
    if req.uri().path() != "/metrics" {
        return reply(
            StatusCode::NOT_FOUND,
            text,
            "not found: metrics are at /metrics\n".into(),
        );
    }
    if req.method() != Method::GET {
        let mut r = reply(
            StatusCode::METHOD_NOT_ALLOWED,
            text,
            format!("{} not allowed: GET /metrics\n", req.method()),
        );
        r.headers_mut()
            .insert(ALLOW, "GET".parse().expect("a header value"));
        return r;
    }
    reply(StatusCode::OK, OPENMETRICS, sources.scrape().await)
}
