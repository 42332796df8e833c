"""ORM models: the controller's state. The database is the source of truth; Redis only
carries copies of it to the agents."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from lachesis_controller.db import UTCDateTime

# The values of the string columns that hold one of a few (the REST schemas serve them as
# these types). The columns stay String(16): the names are the code's, not the database's.
RolloutState = Literal["pending", "succeeded", "failed", "timed_out"]
RolloutPhase = Literal["quiesce", "hold", "install"]
TargetStatus = Literal["pending", "applied", "rejected"]
TargetPhase = Literal["quiesce", "drained", "install"]
Role = Literal["admin", "operator", "viewer"]
AllocationState = Literal["current", "proposed"]
PredictedBy = Literal["simulator", "model"]
Pace = Literal["deadline", "budget"]
JobState = Literal["pending", "running", "paused", "done", "missed", "failed", "cancelled"]


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime()}


class Host(Base):
    __tablename__ = "hosts"

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    agent_version: Mapped[str] = mapped_column(String(64))
    # As the agent registered them (registration.capabilities), shown back unchanged.
    capabilities: Mapped[dict[str, Any]] = mapped_column(JSON)
    enrolled_at: Mapped[datetime]
    registered_at: Mapped[datetime]
    last_seen: Mapped[datetime]
    # Generation of the newest desired state the controller decided for this host; only grows.
    desired_generation: Mapped[int] = mapped_column(Integer, default=0)
    # Newest generation the agent acked as applied; 0 until the first ack.
    acked_generation: Mapped[int] = mapped_column(Integer, default=0)


class Tenant(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    description: Mapped[str | None] = mapped_column(Text)
    classifiers: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class Rule(Base):
    __tablename__ = "rules"
    __table_args__ = (Index("ix_rules_priority_name", "priority", "name"),)

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    priority: Mapped[int] = mapped_column(Integer)
    # Copy of match.tenant so the database itself refuses to drop a tenant a rule names.
    tenant: Mapped[str | None] = mapped_column(ForeignKey("tenants.name", ondelete="RESTRICT"), index=True)
    # None = every host, present and future.
    hosts: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    match: Mapped[dict[str, Any]] = mapped_column(JSON)
    detours: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    def applies_to(self, host_id: str) -> bool:
        return self.hosts is None or host_id in self.hosts


class Rollout(Base):
    __tablename__ = "rollouts"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    cause: Mapped[str] = mapped_column(Text)
    traceparent: Mapped[str | None] = mapped_column(String(55))
    state: Mapped[RolloutState] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(index=True)
    deadline: Mapped[datetime]
    # The time it was given (deadline - created_at when made); its rollback gets as long.
    timeout_s: Mapped[float | None] = mapped_column(Float)
    completed_at: Mapped[datetime | None]
    # Two-phase rollouts (a change that moves flows): quiesce | hold | install; null: one phase.
    phase: Mapped[RolloutPhase | None] = mapped_column(String(16))
    # The rollout that rolled this one's hosts back after it failed or timed out.
    rolled_back_by: Mapped[str | None] = mapped_column(String(36))
    # While pending: what this rollout ships that the one before it did not (rollout/intent.py's
    # diff), so a failure can put the database back. Cleared once it is decided.
    changes: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    # After a rollback: the resources the database got back ({kind, name}).
    restored: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))

    targets: Mapped[list[RolloutTarget]] = relationship(
        back_populates="rollout",
        order_by="RolloutTarget.host_id",
        cascade="all, delete-orphan",
        # Every reader of a rollout reads its targets (lists of 50 rollouts included): one
        # IN query for all of them, not one query per rollout.
        lazy="selectin",
    )


class RolloutTarget(Base):
    __tablename__ = "rollout_targets"
    # A generation of a host belongs to exactly one rollout: acks are matched by it.
    __table_args__ = (UniqueConstraint("host_id", "generation", name="uq_rollout_targets_host_generation"),)

    rollout_id: Mapped[str] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True)
    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    generation: Mapped[int] = mapped_column(Integer)
    status: Mapped[TargetStatus] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    acked_at: Mapped[datetime | None]
    # The state this generation ships, shared with every target shipping the same state;
    # with the rollout (id, issued_at = created_at, traceparent) and the three fields below
    # it renders the message byte for byte (rollouts.message_of). Null once pruned.
    state_id: Mapped[str | None] = mapped_column(ForeignKey("desired_states.id", ondelete="SET NULL"), index=True)
    # quiesce (phase 1 sent) | drained (phase 1 acked) | install (one-phase, or phase 2 sent)
    phase: Mapped[TargetPhase] = mapped_column(String(16), server_default="install")
    # The flows phase 1 quiesces (two-phase rollouts only).
    quiesce: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    # A rollback's target: the generation whose state it restores.
    restores: Mapped[int | None] = mapped_column(Integer)
    drained_at: Mapped[datetime | None]

    rollout: Mapped[Rollout] = relationship(back_populates="targets")
    state: Mapped[DesiredStateBody | None] = relationship()


class DesiredStateBody(Base):
    """What a desired-state message carries besides its envelope (tenants, rules, stages,
    caches), stored once however many hosts and generations ship it."""

    __tablename__ = "desired_states"

    # SHA-256 of the body's canonical JSON.
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]


class ShippedIntent(Base):
    """The intent (tenants, rules, stages, policies, allocation, placements) as the newest
    rollout shipped it: the "before" of the next rollout's changes (rollout/intent.py)."""

    __tablename__ = "shipped_intent"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    snapshot: Mapped[dict[str, Any]] = mapped_column(JSON)


class ApiToken(Base):
    """A bearer token the API accepts besides the bootstrap LACHESIS_API_TOKEN.

    Only the SHA-256 of the secret is kept: the secret is shown once, at creation, and a
    copy of the database gives nobody a working token. SHA-256 without salt or stretching
    is enough because the secret is 256 random bits, not a password a user chose.
    """

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    role: Mapped[Role] = mapped_column(String(16))
    # Set: the token sees and changes only this tenant. No foreign key on purpose: a token
    # may be made for a tenant before its policy creates it, and deleting a tenant must not
    # silently widen or delete its tokens.
    tenant: Mapped[str | None] = mapped_column(String(63))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))
    revoked_at: Mapped[datetime | None]


class AuditEvent(Base):
    """One change of state through the API: who did what, and the resource before and after."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(index=True)
    actor: Mapped[str] = mapped_column(String(128))
    # e.g. rule.create, tenant.delete, token.revoke
    action: Mapped[str] = mapped_column(String(32))
    resource_kind: Mapped[str] = mapped_column(String(16))
    # As long as the longest name it records (a stage: 128).
    resource_name: Mapped[str] = mapped_column(String(128))
    # The tenant the change concerns, so a tenant-scoped token can read its own trail.
    tenant: Mapped[str | None] = mapped_column(String(63), index=True)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    rollout_id: Mapped[str | None] = mapped_column(String(36), index=True)


class PolicyVersion(Base):
    """Each applied version of a policy document; the newest one of a name is in force.

    `compiled` is what it compiled to (tenants, stages, rules), which is also what it owns:
    the next version of the same policy replaces exactly these.
    """

    __tablename__ = "policy_versions"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    document: Mapped[str] = mapped_column(Text)
    compiled: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Tenants the policy concerns, for tenant-scoped reads.
    tenants: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))
    rollout_id: Mapped[str | None] = mapped_column(String(36))


class AgentCredential(Base):
    """The Redis ACL user of one agent (bus/client.py: agent_acl_rules). Only the SHA-256 of the
    secret is kept, the same hash Redis holds, so the controller can recreate the user after
    Redis lost it without ever storing the secret."""

    __tablename__ = "agent_credentials"

    host_id: Mapped[str] = mapped_column(String(63), primary_key=True)
    redis_user: Mapped[str] = mapped_column(String(80), unique=True)
    secret_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))


# --- Cache allocation and FDP placement (allocation/, placement/, api/allocations.py,
# api/placements.py; migration 0004) ---------------------------------------------------------


class AllocationCurve(Base):
    """A tenant's latest hit-ratio curve as supplied to the allocator. No foreign key: curves
    come from telemetry, which may know a tenant before or after its policy does."""

    __tablename__ = "allocation_curves"

    tenant: Mapped[str] = mapped_column(String(63), primary_key=True)
    sizes: Mapped[list[float]] = mapped_column(JSON)  # bytes
    miss_ratios: Mapped[list[float]] = mapped_column(JSON)
    # Requests per second: the tenant's weight in the weighted hit rate.
    weight: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[datetime]


class AllocationGuarantee(Base):
    __tablename__ = "allocation_guarantees"

    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name", ondelete="CASCADE"), primary_key=True)
    # min_hit_ratio | bandwidth | fixed_size; spec holds the kind's parameters as sent.
    kind: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime]


class CacheAllocation(Base):
    """One allocation: the one in force ("current") or the latest computed ("proposed")."""

    __tablename__ = "cache_allocations"

    state: Mapped[AllocationState] = mapped_column(String(16), primary_key=True)
    capacity_bytes: Mapped[float] = mapped_column(Float)
    epsilon_bytes: Mapped[float] = mapped_column(Float)
    method: Mapped[str] = mapped_column(String(16))
    utility: Mapped[float] = mapped_column(Float)
    upper_bound: Mapped[float] = mapped_column(Float)
    optimal: Mapped[bool]
    # Per tenant: size_bytes, reserved_bytes, hit_ratio, weight, curve point, idle.
    tenants: Mapped[dict[str, Any]] = mapped_column(JSON)
    computed_at: Mapped[datetime]
    computed_by: Mapped[str] = mapped_column(String(128))


class DevicePlacement(Base):
    """The placement broker's last answer for one device: handle per stream, predicted DLWA."""

    __tablename__ = "device_placements"

    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    device: Mapped[str] = mapped_column(String(63), primary_key=True)
    handles: Mapped[int] = mapped_column(Integer)
    overprovisioning: Mapped[float] = mapped_column(Float)
    reclaim_units: Mapped[int] = mapped_column(Integer)
    # [{tenant, part, space, writes, trimmed, handle}]
    streams: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    shared: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    predicted_dlwa: Mapped[float] = mapped_column(Float)
    predicted_by: Mapped[PredictedBy] = mapped_column(String(16))
    model_dlwa: Mapped[float] = mapped_column(Float)
    warnings: Mapped[list[str]] = mapped_column(JSON)
    computed_at: Mapped[datetime]


class PlacementAssignment(Base):
    """The placement handle each owned flash cache stream was last shipped with, per host:
    automatic placement keeps these (a stream whose handle changes is rebuilt cold), so they
    are kept as rows rather than recovered from the last desired state's JSON. Replaced as a
    whole for a host by every generation shipped to it (rollout/engine.py)."""

    __tablename__ = "placement_assignments"

    host_id: Mapped[str] = mapped_column(ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True)
    device: Mapped[str] = mapped_column(String(63), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(63), primary_key=True)
    part: Mapped[str] = mapped_column(String(16), primary_key=True)
    handle: Mapped[int] = mapped_column(Integer)
    # The host's generation that shipped it.
    generation: Mapped[int] = mapped_column(Integer)


class Stage(Base):
    """A stage declared through REST (`/api/v1/stages`, Moirai's cache API). Stages declared
    by policies live in their policy versions; stages/store.py reads both as one list."""

    __tablename__ = "stages"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    # The database itself refuses to drop a tenant that owns a stage.
    owner: Mapped[str | None] = mapped_column(ForeignKey("tenants.name", ondelete="RESTRICT"), index=True)
    # The declaration as sent (policy/document.py's stage kinds), with its defaults filled in.
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))


class DeclaredJob(Base):
    """A declared maintenance IO job (declared_io/): the file ranges of a tenant on a host to
    read by a deadline, and its progress as the host's agent last reported it."""

    __tablename__ = "declared_jobs"
    __table_args__ = (Index("ix_declared_jobs_host_state", "host_id", "state"),)

    id: Mapped[str] = mapped_column(String(63), primary_key=True)
    host_id: Mapped[str] = mapped_column(String(63))
    tenant: Mapped[str] = mapped_column(String(63), index=True)
    # [{path, offset, length}] as declared (length null: to the file's end).
    files: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    deadline: Mapped[datetime]
    pace: Mapped[Pace] = mapped_column(String(16))
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    rate_bytes_per_s: Mapped[int | None] = mapped_column(BigInteger)
    # The policy or REST stage of kind scrub that declared it; None: declared through REST.
    source: Mapped[str | None] = mapped_column(String(128), index=True)
    # pending (not reported yet), running, paused, done, missed, failed, cancelled.
    state: Mapped[JobState] = mapped_column(String(16))
    bytes_declared: Mapped[int | None] = mapped_column(BigInteger)
    dispatched_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    foreground_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    shared_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    # Once done: [{path, offset, length, crc32}] from the agent.
    checksums: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))
    reported_at: Mapped[datetime | None]
    # When every declared byte was covered (done, or missed and finished late).
    finished_at: Mapped[datetime | None]


class TailLatencyState(Base):
    """The tail-latency application's decision for one tail_latency stage (tail_latency/):
    whether its owner's writes are forwarded, to which server, since which rollout, and the
    reclaim phase. What the stage contract ships comes from here, so a restarted controller
    or a new leader ships the same forwarding (and a paced reclaim goes on paced)."""

    __tablename__ = "tail_latency_states"

    stage: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(63))
    # normal, forwarding or reclaiming (decide.py).
    state: Mapped[str] = mapped_column(String(16))
    # tcp://HOST:PORT/dir of the server the log lives on; None while normal.
    forwarded_to: Mapped[str | None] = mapped_column(Text)
    # Set while reclaiming: the rate the log is copied back at.
    reclaim_bytes_per_s: Mapped[int | None] = mapped_column(BigInteger)
    baseline_us: Mapped[float | None] = mapped_column(Float)
    forwards: Mapped[int] = mapped_column(Integer, default=0)
    reclaims: Mapped[int] = mapped_column(Integer, default=0)
    # The rollout that began the current forwarding (its targets' generations ship the log first).
    since_rollout: Mapped[str | None] = mapped_column(String(36))
    updated_at: Mapped[datetime]


class ReadGeneration(Base):
    """A counter per table whose reads the REST API caches (api/read_cache.py): triggers of
    the database (migration 0012) add one at the commit of every transaction that wrote a
    row of `name`, whatever code wrote it, so a replica that reads the counter before
    answering never serves what another replica's acknowledged write has replaced."""

    __tablename__ = "read_generations"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)
