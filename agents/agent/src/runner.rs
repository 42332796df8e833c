//! The agent's control path on the Redis bus: register, resync, follow the inbox, ack, and
//! heartbeat; reconnect forever when Redis goes away.
//!
//! Two tasks, each with its own connection:
//! - the control loop (one session per connection): `XADD lachesis:agent:{host}:registrations`, then read
//!   the last id of the inbox, `GET` the desired key and apply it, then `XREAD BLOCK` the inbox
//!   from that id; every desired state is handled by [`AgentState`] and acked on
//!   `lachesis:agent:{host}:acks`. Any Redis error ends the session; the loop backs off (doubling, capped at
//!   [`Config::max_backoff`]) and starts a new one, which registers and resyncs again.
//!   A two-phase rollout's quiesce phase is handed to the data path through
//!   [`FlowControl`] (quiesce, drain, then ack); its install phase resumes the flows.
//! - the heartbeat: `SET lachesis:agent:{host}:heartbeat <json> EX ttl` every interval and as
//!   soon as a new generation is applied; after a failure it retries on the same backoff.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamRangeReply, StreamReadReply};
use redis::{AsyncConnectionConfig, Client};
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};
use tracing::{debug, error, info, info_span, warn, Instrument, Span};

use crate::bus::{
    keys, AckStatus, DesiredState, Heartbeat, HeartbeatSchema, Phase, Registration, Timestamp,
};
use crate::bus_lag::BusProgress;
use crate::flow_gate::{drain, Drained, FlowControl, InFlightGate};
use crate::otel;
use crate::persist::Persisted;
use crate::state::{AgentState, Applied, Outcome};

/// Settings of the control path.
#[derive(Debug, Clone)]
pub struct Config {
    pub host_id: String,
    pub heartbeat_interval: Duration,
    pub heartbeat_ttl: Duration,
    /// How long one `XREAD BLOCK` waits.
    pub block: Duration,
    /// First delay before reconnecting; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// Longest wait for the in-flight IO of quiesced flows; past it the quiesce is refused.
    pub drain_timeout: Duration,
}

impl Config {
    pub fn new(host_id: impl Into<String>) -> Self {
        Config {
            host_id: host_id.into(),
            heartbeat_interval: Duration::from_secs(5),
            heartbeat_ttl: Duration::from_secs(15),
            block: Duration::from_secs(2),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Exponential backoff between reconnect attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The delay to wait now; the following one is twice as long, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Programs the data path with an applied desired state, before its flows resume. An error
/// rejects the generation (the ack carries it as the reason).
pub trait Installer: Send + Sync {
    fn install(&self, applied: &Applied) -> Result<(), String>;
}

/// The agent: its soft state and the bus connection settings.
pub struct Agent {
    cfg: Config,
    client: Client,
    registration: Registration,
    state: AgentState,
    applied_tx: watch::Sender<Applied>,
    flows: Arc<dyn FlowControl>,
    installer: Option<Arc<dyn Installer>>,
    /// Where the last applied and acked state is kept across restarts.
    persist: Option<Persisted>,
    progress: Arc<BusProgress>,
}

impl Agent {
    /// An agent holding generation 0. `registration` is sent after every (re)connect.
    pub fn new(cfg: Config, client: Client, registration: Registration) -> Self {
        let state = AgentState::new(cfg.host_id.clone());
        let (applied_tx, _) = watch::channel(state.applied().clone());
        Agent {
            cfg,
            client,
            registration,
            state,
            applied_tx,
            flows: InFlightGate::new(),
            installer: None,
            persist: None,
            progress: Arc::default(),
        }
    }

    /// Keep every applied and acked state in `persist`, and start from the one saved there.
    pub fn with_persistence(mut self, persist: Persisted) -> Self {
        self.persist = Some(persist);
        self
    }

    /// Restores and installs the state saved by an earlier run, so the data path runs it
    /// before the controller is reached; anything wrong with it is logged and the agent
    /// starts from generation 0, as without a saved state.
    pub fn restore_saved(&mut self) {
        let Some(p) = &self.persist else { return };
        let msg = match p.load() {
            Ok(Some(m)) => m,
            Ok(None) => {
                return info!(file = %p.path().display(), "no saved state, starting from generation 0")
            }
            Err(e) => {
                return error!(error = %e, "saved state unreadable, starting from generation 0")
            }
        };
        if let Err(e) = self.state.restore(&msg) {
            return error!(error = %e, "saved state refused, starting from generation 0");
        }
        if let Some(inst) = &self.installer {
            if let Err(e) = inst.install(self.state.applied()) {
                self.state = AgentState::new(self.cfg.host_id.clone());
                return error!(generation = msg.generation, error = %e, "data path refused the saved state, starting from generation 0");
            }
        }
        info!(
            generation = msg.generation,
            rollout_id = %or_dash(&msg.rollout_id),
            rules = self.state.applied().table.len(),
            tenants = msg.tenants.len(),
            file = %p.path().display(),
            "restored the last acknowledged state"
        );
        self.applied_tx.send_replace(self.state.applied().clone());
    }

    /// Let `flows` (the data path) carry out quiesce, drain and resume; by default an
    /// in-process [`InFlightGate`] that no IO passes through.
    pub fn with_flow_control(mut self, flows: Arc<dyn FlowControl>) -> Self {
        self.flows = flows;
        self
    }

    /// Install every applied desired state into `installer` (the data path's rule table).
    pub fn with_installer(mut self, installer: Arc<dyn Installer>) -> Self {
        self.installer = Some(installer);
        self
    }

    /// When the control loop last read the bus, and up to which inbox entry.
    pub fn bus_progress(&self) -> Arc<BusProgress> {
        self.progress.clone()
    }

    /// Follow the applied state (generation, rule table) as it changes.
    pub fn subscribe(&self) -> watch::Receiver<Applied> {
        self.applied_tx.subscribe()
    }

    /// Run until `shutdown` completes. Never fails because of Redis: it reconnects. A saved
    /// state is restored and installed first ([`Agent::restore_saved`]).
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        self.restore_saved();
        let heartbeat = tokio::spawn(heartbeat_loop(
            self.client.clone(),
            self.cfg.clone(),
            self.applied_tx.subscribe(),
        ));
        let control = control_loop(self);
        tokio::select! {
            () = shutdown => {}
            never = control => match never {},
        }
        heartbeat.abort();
        let _ = heartbeat.await;
    }
}

fn conn_config(response_timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout))
}

fn or_dash(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("-")
}

fn count_or_dash(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |n| n.to_string())
}

async fn control_loop(mut agent: Agent) -> Infallible {
    let mut backoff = Backoff::new(agent.cfg.min_backoff, agent.cfg.max_backoff);
    loop {
        let err = match session(&mut agent, &mut backoff).await {
            Err(e) => e,
            Ok(never) => match never {},
        };
        let delay = backoff.next_delay();
        warn!(
            host_id = %agent.cfg.host_id,
            retry_in_ms = delay.as_millis() as u64,
            error = %err,
            "redis unavailable, reconnecting"
        );
        sleep(delay).await;
    }
}

/// One connection's life: register, resync, follow the inbox. Returns only on error.
async fn session(agent: &mut Agent, backoff: &mut Backoff) -> anyhow::Result<Infallible> {
    let host = agent.cfg.host_id.clone();
    // The blocking XREAD runs on this connection too (the session is sequential), so the
    // response timeout must outlast the block.
    let mut con = agent
        .client
        .get_multiplexed_async_connection_with_config(&conn_config(
            agent.cfg.block + Duration::from_secs(3),
        ))
        .await?;

    let reg = serde_json::to_string(&agent.registration)?;
    let reg_id: String = redis::cmd("XADD")
        .arg(keys::registrations(&host))
        .arg("*")
        .arg(keys::FIELD)
        .arg(&reg)
        .query_async(&mut con)
        .await?;
    backoff.reset();
    info!(host_id = %host, entry = %reg_id, "registered with the controller");

    // Resync: note where the inbox ends, then apply the latest desired state, then follow the
    // inbox from the noted end, so nothing issued meanwhile is missed.
    let inbox = keys::inbox(&host);
    let mut last_id = stream_end(&mut con, &inbox).await?;
    let desired_key = keys::desired(&host);
    let desired: Option<String> = redis::cmd("GET")
        .arg(&desired_key)
        .query_async(&mut con)
        .await?;
    match desired {
        Some(text) => handle_message(agent, &mut con, &desired_key, None, &text).await?,
        None => info!(key = %desired_key, "no desired state published yet"),
    }
    agent.progress.read(&last_id);
    info!(
        host_id = %host,
        generation = agent.state.generation(),
        inbox_from = %last_id,
        "resynced, following the inbox"
    );

    let block_ms = agent.cfg.block.as_millis() as u64;
    loop {
        let reply: Option<StreamReadReply> = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(64)
            .arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(&inbox)
            .arg(&last_id)
            .query_async(&mut con)
            .await?;
        let entries = reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids);
        for entry in entries {
            last_id = entry.id.clone();
            match entry.get::<String>(keys::FIELD) {
                Some(text) => {
                    handle_message(agent, &mut con, &inbox, Some(&entry.id), &text).await?
                }
                None => error!(
                    key = %inbox,
                    entry = %entry.id,
                    "stream entry has no text field {:?}; skipped", keys::FIELD
                ),
            }
        }
        agent.progress.read(&last_id);
    }
}

/// Parse, apply and ack one desired state read from `key` (the desired key, or an `entry` of
/// the inbox). Invalid JSON is logged and skipped (no ack: its generation is unknown). Only
/// Redis errors are returned.
async fn handle_message(
    agent: &mut Agent,
    con: &mut MultiplexedConnection,
    key: &str,
    entry: Option<&str>,
    text: &str,
) -> anyhow::Result<()> {
    let entry = entry.unwrap_or("-");
    let msg: DesiredState = match serde_json::from_str(text) {
        Ok(m) => m,
        Err(e) => {
            error!(key = %key, entry = %entry, error = %e, "invalid desired-state message; skipped");
            return Ok(());
        }
    };
    // The trace of the REST call that caused this generation goes on here: one span for the
    // message, one for each phase it sets off, one for its ack.
    let span = info_span!(
        target: otel::TARGET, "desired state",
        otel.kind = "consumer",
        otel.status_code = tracing::field::Empty,
        lachesis.generation = msg.generation,
        lachesis.phase = %msg.phase.unwrap_or(Phase::Install),
        lachesis.rollout_id = or_dash(&msg.rollout_id),
    );
    otel::continue_trace(&span, msg.traceparent.as_deref());
    apply_and_ack(agent, con, key, entry, msg)
        .instrument(span)
        .await
}

async fn apply_and_ack(
    agent: &mut Agent,
    con: &mut MultiplexedConnection,
    key: &str,
    entry: &str,
    msg: DesiredState,
) -> anyhow::Result<()> {
    let held = agent.state.generation();
    let quiescing = agent.state.quiescing();
    let previous = agent.state.applied().clone();
    let (outcome, mut ack) = agent.state.handle(&msg);
    let rules = agent.state.applied().table.len();
    let rollout = or_dash(&msg.rollout_id);
    match &outcome {
        Outcome::Quiesce { flows } => {
            info!(
                generation = msg.generation,
                rollout_id = %rollout,
                flows = flows.len(),
                held,
                "quiesce"
            );
            info_span!(target: otel::TARGET, "quiesce", lachesis.flows = flows.len())
                .in_scope(|| agent.flows.quiesce(flows));
            let drained = drain(agent.flows.as_ref(), agent.cfg.drain_timeout)
                .instrument(info_span!(target: otel::TARGET, "drain"))
                .await;
            match drained {
                Drained::Done { waited_for } => {
                    // `admitted` here and at the resume: equal, nothing was admitted between.
                    info!(
                        generation = msg.generation,
                        rollout_id = %rollout,
                        waited_for,
                        admitted = %count_or_dash(agent.flows.admitted()),
                        "drain"
                    );
                    ack.drained = Some(waited_for);
                }
                Drained::TimedOut { left } => {
                    // Stay quiesced: the controller rolls back, and that install resumes.
                    warn!(generation = msg.generation, rollout_id = %rollout, left, "drain timed out");
                    ack.status = AckStatus::Rejected;
                    ack.reason = Some(format!(
                        "drain timed out after {} ms with {left} operation(s) in flight",
                        agent.cfg.drain_timeout.as_millis()
                    ));
                }
            }
        }
        Outcome::AlreadyInstalled => info!(
            generation = msg.generation,
            rollout_id = %rollout,
            "quiesce of the generation already installed, acked again"
        ),
        Outcome::Applied => {
            info_span!(target: otel::TARGET, "install", lachesis.rules = rules).in_scope(|| {
                if let Some(inst) = &agent.installer {
                    if let Err(e) = inst.install(agent.state.applied()) {
                        error!(generation = msg.generation, rollout_id = %rollout, error = %e, "data path refused the rules");
                        ack.status = AckStatus::Rejected;
                        ack.reason = Some(format!("data path: {e}"));
                        ack.rules_installed = previous.table.len() as u64;
                        agent.state.refused_by_data_path(previous);
                    }
                }
                info!(
                    generation = msg.generation,
                    rollout_id = %rollout,
                    restores = msg.restores,
                    rules,
                    "install"
                );
            });
            if quiescing.is_some() && agent.state.quiescing().is_none() {
                // Counted before the resume lets the held IO in: `released` were waiting.
                let (admitted, released) = (agent.flows.admitted(), agent.flows.waiting());
                info_span!(target: otel::TARGET, "resume", lachesis.released = released)
                    .in_scope(|| agent.flows.resume());
                info!(
                    generation = msg.generation,
                    rollout_id = %rollout,
                    admitted = %count_or_dash(admitted),
                    released,
                    "resume"
                );
            }
            info!(
                generation = msg.generation,
                previous = held,
                rollout_id = %or_dash(&msg.rollout_id),
                traceparent = %or_dash(&msg.traceparent),
                rules,
                tenants = msg.tenants.len(),
                key = %key,
            entry = %entry,
                "applied desired state"
            );
            agent.applied_tx.send_replace(agent.state.applied().clone());
        }
        Outcome::AlreadyApplied => info!(
            generation = msg.generation,
            rollout_id = %or_dash(&msg.rollout_id),
            traceparent = %or_dash(&msg.traceparent),
            rules,
            key = %key,
            entry = %entry,
            "generation already applied, acked again"
        ),
        Outcome::Stale { held } => warn!(
            generation = msg.generation,
            held,
            rollout_id = %or_dash(&msg.rollout_id),
            traceparent = %or_dash(&msg.traceparent),
            key = %key,
            entry = %entry,
            "refused stale generation"
        ),
        Outcome::Invalid { reason } => warn!(
            generation = msg.generation,
            held,
            rollout_id = %or_dash(&msg.rollout_id),
            traceparent = %or_dash(&msg.traceparent),
            reason = %reason,
            key = %key,
            entry = %entry,
            "refused desired state"
        ),
    }
    if outcome == Outcome::Applied && ack.status == AckStatus::Applied {
        if let Some(p) = &agent.persist {
            // Saved before the ack goes out: whatever the controller saw acked is on disk.
            let saved = DesiredState {
                phase: None,
                quiesce: None,
                ..msg.clone()
            };
            if let Err(e) = p.save(&saved) {
                error!(generation = msg.generation, error = %e, "cannot save the applied state; a restart starts from generation 0");
            }
        }
    }
    if ack.status == AckStatus::Rejected {
        Span::current().record("otel.status_code", "error");
    }
    let ack_span = info_span!(target: otel::TARGET, "ack", lachesis.ack.status = %ack.status);
    // The controller's ack span continues from this one; with traces off the ack carries the
    // message's own traceparent, as it always did.
    if let Some(tp) = otel::traceparent_of(&ack_span) {
        ack.traceparent = Some(tp);
    }
    let ack_json = serde_json::to_string(&ack)?;
    let ack_id: String = redis::cmd("XADD")
        .arg(keys::acks(&ack.host_id))
        .arg("*")
        .arg(keys::FIELD)
        .arg(&ack_json)
        .query_async(con)
        .instrument(ack_span)
        .await?;
    debug!(generation = ack.generation, phase = ?ack.phase, status = %ack.status, entry = %ack_id, "acked");
    Ok(())
}

async fn heartbeat_loop(client: Client, cfg: Config, mut applied: watch::Receiver<Applied>) {
    let started = Instant::now();
    let key = keys::heartbeat(&cfg.host_id);
    let ttl_s = cfg.heartbeat_ttl.as_secs().max(1);
    let mut con: Option<MultiplexedConnection> = None;
    let mut backoff = Backoff::new(cfg.min_backoff, cfg.max_backoff);
    let mut failing = false;
    let mut sender_alive = true;
    let mut next = Instant::now();
    loop {
        tokio::select! {
            () = sleep_until(next) => {}
            changed = applied.changed(), if sender_alive => {
                if changed.is_err() {
                    sender_alive = false;
                    continue;
                }
            }
        }
        let generation = applied.borrow_and_update().generation;
        let hb = Heartbeat {
            schema: HeartbeatSchema,
            host_id: cfg.host_id.clone(),
            sent_at: Timestamp::now(),
            generation,
            uptime_s: started.elapsed().as_millis() as f64 / 1000.0,
        };
        let result = async {
            if con.is_none() {
                con = Some(
                    client
                        .get_multiplexed_async_connection_with_config(&conn_config(
                            Duration::from_secs(2),
                        ))
                        .await?,
                );
            }
            let c = con.as_mut().expect("connected above");
            let json = serde_json::to_string(&hb)?;
            redis::cmd("SET")
                .arg(&key)
                .arg(json)
                .arg("EX")
                .arg(ttl_s)
                .query_async::<()>(c)
                .await?;
            anyhow::Ok(())
        }
        .await;
        match result {
            Ok(()) => {
                if failing {
                    info!(key = %key, generation, "heartbeat restored");
                }
                failing = false;
                backoff.reset();
                debug!(key = %key, generation, "heartbeat");
                next = Instant::now() + cfg.heartbeat_interval;
            }
            Err(e) => {
                con = None;
                let delay = backoff.next_delay();
                if failing {
                    debug!(key = %key, error = %e, "heartbeat failed again");
                } else {
                    warn!(
                        key = %key,
                        retry_in_ms = delay.as_millis() as u64,
                        error = %e,
                        "heartbeat failed"
                    );
                }
                failing = true;
                next = Instant::now() + delay;
            }
        }
    }
}

/// The id of the last entry of stream `key` ("0-0" when empty): reading on from it sees
/// only what is added afterwards.
pub(crate) async fn stream_end(
    con: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> redis::RedisResult<String> {
    let tail: StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(key)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(con)
        .await?;
    Ok(tail
        .ids
        .first()
        .map_or_else(|| "0-0".to_string(), |e| e.id.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let got: Vec<u128> = (0..6).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }
}
