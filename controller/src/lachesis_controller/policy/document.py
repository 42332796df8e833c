"""The policy document (apiVersion lachesis.dev/v1, kind Policy) as pydantic models.

These models are the source of policies/schema/policy.schema.json (policy/json_schema.py writes
it; a test keeps the two equal), so the API and the published schema accept the same
documents. A policy states tenants, the stages their IO may be sent through (caches, QoS
limits, log writers, replica sets, tail-latency routers, FDP placements) and the sRoute rules
that send it there. stages/resolve.py turns them into what the agents run (the stage
contract of desired state); docs/policies.md says what each kind becomes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from lachesis_controller.bus.messages import MAX_BYTES, CacheEngine, HostId, Name
from lachesis_controller.bus.messages import ServeDir as ServeDir
from lachesis_controller.schemas.base import RequestModel
from lachesis_controller.schemas.rules import RuleSpec
from lachesis_controller.schemas.tenants import TenantSpec
from lachesis_controller.validation.bounds import (
    MAX_HOSTS_PER_ITEM,
    MAX_PATHS,
    MAX_RULES,
    MAX_STAGES,
    MAX_TENANTS,
    HostPath,
)

API_VERSION = "lachesis.dev/v1"

FilePath = HostPath


class Metadata(RequestModel):
    name: Name
    description: str | None = Field(default=None, max_length=1024)


class TwoLevel(RequestModel):
    """Bandwidths of the two cache levels and the store behind them (bytes/s), and the SLA."""

    memory_bytes_per_s: float = Field(gt=0, le=1e18, description="Reads served by the host's level.")
    network_bytes_per_s: float = Field(gt=0, le=1e18, description="Reads served by the server's level.")
    storage_bytes_per_s: float = Field(gt=0, le=1e18, description="Reads served by the server's store.")
    sla_bytes_per_s: float | None = Field(
        default=None,
        gt=0,
        le=1e18,
        description="Bandwidth to reach; null: the best the two levels' maxima allow, at the smallest total.",
    )
    server_max_bytes: int = Field(ge=0, le=1 << 50, description="Most the server level may give the owner (a2).")

    @model_validator(mode="after")
    def _ordered(self) -> TwoLevel:
        # Eq. 5.7 assumes each level is at least as fast as the one behind it.
        if not self.memory_bytes_per_s >= self.network_bytes_per_s >= self.storage_bytes_per_s:
            raise ValueError("memory_bytes_per_s >= network_bytes_per_s >= storage_bytes_per_s must hold")
        return self


class StageBase(RequestModel):
    name: str = Field(
        pattern=r"^[a-z0-9]([a-z0-9/-]{0,126}[a-z0-9])?$",
        description="What rules name as a stage target, e.g. cache/web.",
    )
    owner: Name | None = Field(default=None, description="Tenant the stage belongs to; null: shared infrastructure.")
    shared_with: list[Name] = Field(
        default_factory=list,
        max_length=MAX_PATHS,
        description="Other tenants whose IO may go through this stage. Without it, only the owner's.",
    )
    hosts: list[HostId] | None = Field(
        default=None, min_length=1, max_length=MAX_HOSTS_PER_ITEM, description="null: every host."
    )


class CacheStage(StageBase):
    kind: Literal["cache"]
    size_bytes: int = Field(
        ge=1 << 20,
        le=1 << 50,
        description="Declared size; the allocation loop's share of the owner replaces it while an allocation is in force.",
    )
    level: Literal[1, 2] = 1
    parent: str | None = Field(default=None, description="Level-2 cache stage misses go to.")
    eviction: Literal["lru", "fifo", "mrc"] = Field(
        default="lru",
        description="mrc (one shared stage partitioned by its tenants' miss-ratio curves) is refused until an agent "
        "can honour it: it would ship as lru.",
    )
    engine: CacheEngine | None = Field(default=None, description="null: loc on a host with a flash device, else dram.")
    write_mode: Literal["through", "back", "around"] = "through"
    max_dirty_bytes: int = Field(default=16 << 20, ge=4096, le=1 << 50)
    device: Name | None = Field(default=None, description="The host's flash device; null: its first.")
    serves: list[ServeDir] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Server level of a two-level cache (level 2): directories under the root of the forwarding "
        "server of the hosts it applies to (agents run with --serve-listen/--serve-root; the dir of tcp://HOST:PORT/dir "
        "endpoints) whose forwarded reads it caches in front of the server's store. With a two-level allocation in force "
        "its size is the owner's a2 (with shared_with: the sum of their a2, one consolidated pool). null: a host-level stage.",
    )
    exclusive: bool = Field(
        default=False,
        description="With serves: exclusive of level 1 (Moirai's global LRU): the reads of a level 1 that demotes "
        "(a dram stage in front of the remote endpoint) neither fill it nor stay in it, and it holds the clean blocks "
        "level 1 evicts and demotes to it. false: it caches level 1's misses (inclusive).",
    )
    two_level: TwoLevel | None = Field(
        default=None,
        description="On a level-1 stage: the allocation loop splits its owner's cache between this stage and the "
        "level-2 stage it names as parent (Moirai's α, Eqs. 5.3-5.7), with these bandwidths.",
    )

    @field_validator("eviction")
    @classmethod
    def _no_mrc(cls, value: str) -> str:
        if value == "mrc":
            raise ValueError(
                "no agent partitions a shared stage by its tenants' curves yet, so mrc would ship as lru: "
                "use lru (an owned stage is sized by its owner's curve with lru)"
            )
        return value

    @model_validator(mode="after")
    def _exclusive_serves(self) -> CacheStage:
        if self.exclusive and not self.serves:
            raise ValueError("exclusive is for a server-level stage (one with serves)")
        return self


class QosStage(StageBase):
    kind: Literal["qos"]
    priority: Literal["high", "normal", "low"] = Field(
        default="normal",
        description="The owner's weight in each host's IO scheduler beyond reservations (high 32, normal 8, low 2): "
        "queued IO of a high tenant goes 4 times as often as a normal one's, 16 times as often as a low one's.",
    )
    min_bandwidth_bytes_per_s: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BYTES,
        description="Bytes/s reserved in each host's IO scheduler: the owner's queued IO is served ahead of every "
        "weight until it has had this much (dmClock's reservation). At most max_bandwidth_bytes_per_s.",
    )
    max_bandwidth_bytes_per_s: int | None = Field(default=None, ge=1, le=MAX_BYTES)
    max_iops: int | None = Field(default=None, ge=1, le=100_000_000)

    @model_validator(mode="after")
    def _reservation_within_limit(self) -> QosStage:
        low, high = self.min_bandwidth_bytes_per_s, self.max_bandwidth_bytes_per_s
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_bandwidth_bytes_per_s {low} is above max_bandwidth_bytes_per_s {high}")
        return self


class LogStage(StageBase):
    kind: Literal["log"]
    dir: FilePath = Field(description="Where the log writer keeps its log on the host.")


class ReplicaSetStage(StageBase):
    kind: Literal["replica_set"]
    write_set: list[FilePath] = Field(
        min_length=1, max_length=MAX_PATHS, description="Every write goes to all of these."
    )
    read_set: list[FilePath] = Field(min_length=1, max_length=MAX_PATHS, description="Reads go to one of these.")


RemoteServer = Annotated[
    str,
    Field(
        pattern=r"^tcp://[^/:\s]+:[1-9][0-9]{0,4}/[^\s]*$",
        max_length=4096,
        description="A remote endpoint, tcp://HOST:PORT/dir, served by an agent's lachesis-fs serve.",
    ),
]


class TailLatencyStage(StageBase):
    """Two modes. With `candidates` (local replicas): reads are spread over them. With `servers`
    (remote endpoints): the tail-latency routing application (sRoute §6.5.1): the owner's IO
    goes to servers[0]; when its recent latency exceeds `alpha` times its long-run mean, the
    controller forwards the owner's writes into a log on the least loaded other server (reads
    of them follow, by delegates), and once it recovers reclaims them at `reclaim_bytes_per_s`."""

    kind: Literal["tail_latency"]
    candidates: list[FilePath] = Field(
        default_factory=list,
        max_length=MAX_PATHS,
        description="Replicas a read may be sent to (at least 2, or use servers).",
    )
    servers: list[RemoteServer] = Field(
        default_factory=list,
        max_length=MAX_PATHS,
        description="tcp://HOST:PORT/dir endpoints: the first is the owner's, writes may be forwarded to the others.",
    )
    hedge_after_ms: float | None = Field(
        default=None,
        gt=0,
        le=60_000,
        description="Hedged reads: not done by any agent, so refused when set (nothing accepted that is not enforced).",
    )
    alpha: float = Field(default=2.0, gt=1, le=1000, description="Forward when recent latency > alpha x long-run mean.")
    reclaim_bytes_per_s: int = Field(
        default=64 << 20, ge=1, le=MAX_BYTES, description="Pace of copying forwarded data back."
    )
    enter_reports: int = Field(
        default=2,
        ge=1,
        le=100,
        description="Forward only once the endpoint is slow in this many of the agents' reports in a row (1: on the first).",
    )

    @field_validator("hedge_after_ms")
    @classmethod
    def _no_hedging(cls, value: float | None) -> float | None:
        if value is not None:
            raise ValueError(
                "no agent hedges reads yet, so a hedge would be shipped and ignored: leave hedge_after_ms out"
            )
        return value

    @model_validator(mode="after")
    def _two_places(self) -> TailLatencyStage:
        if len(self.candidates) < 2 and len(self.servers) < 2:
            raise ValueError("a tail_latency stage needs at least 2 candidates or at least 2 servers")
        if self.servers and self.candidates:
            raise ValueError(
                "a tail_latency stage has candidates (local replicas) or servers (remote endpoints), not both"
            )
        if self.servers and self.owner is None:
            raise ValueError("a tail_latency stage with servers needs an owner: the tenant whose writes it forwards")
        return self


class FdpPlacementStage(StageBase):
    """The owner's cache stages on `device` write with `placement_handle`. It tags a tenant's
    own writes only: it needs an owner, and nothing is shared."""

    kind: Literal["fdp_placement"]
    owner: Name = Field(description="The tenant whose cache stages' writes on the device carry the handle.")
    device: Name
    placement_handle: int = Field(ge=0, le=65535)

    @field_validator("shared_with")
    @classmethod
    def _not_shared(cls, value: list[str]) -> list[str]:
        return _unshared(value, "a placement tags its owner's cache writes only; give each tenant its own stage")


class ScrubStage(StageBase):
    """A recurring scrub (declared maintenance IO, DINGOS): every `every_s` the controller
    declares a job on each of the stage's hosts that reads `paths` by `window_s` later; the
    agent counts foreground reads for it and reads the rest under its budget. Nothing ships
    as a data-plane stage; rules pass over it."""

    kind: Literal["scrub"]
    owner: Name = Field(description="The tenant whose data it reads.")
    paths: list[FilePath] = Field(
        min_length=1,
        max_length=MAX_PATHS,
        description="Files or directories (every regular file under one) in the hosts' FUSE namespace, e.g. /archive "
        "(or host paths under a mountpoint).",
    )
    every_s: int = Field(
        ge=60, le=366 * 86400, description="A job is declared this long after the previous one was, once it finished."
    )
    window_s: int | None = Field(
        default=None, ge=1, le=366 * 86400, description="Each job's deadline, after its declaration; null: every_s."
    )
    pace: Literal["deadline", "budget"] = Field(
        default="deadline",
        description="deadline: read at the rate that finishes a tenth of the window early, leaving the slack to "
        "foreground reads; budget: at the agent's whole budget at once.",
    )
    rate_bytes_per_s: int | None = Field(
        default=None, ge=1, le=MAX_BYTES, description="Each job's cap under the agent's budget."
    )

    @field_validator("shared_with")
    @classmethod
    def _not_shared(cls, value: list[str]) -> list[str]:
        return _unshared(
            value, "a scrub's jobs count every foreground read of its paths, whoever's: there is nothing to share"
        )


def _unshared(value: list[str], why: str) -> list[str]:
    """Refuses `shared_with` on a stage kind no rule targets: it would be accepted and ignored."""
    if value:
        raise ValueError(f"shared_with is not honoured here: {why}")
    return value


Stage = Annotated[
    CacheStage | QosStage | LogStage | ReplicaSetStage | TailLatencyStage | FdpPlacementStage | ScrubStage,
    Field(discriminator="kind"),
]


class PolicySpec(RequestModel):
    tenants: list[TenantSpec] = Field(default_factory=list, max_length=MAX_TENANTS)
    stages: list[Stage] = Field(default_factory=list, max_length=MAX_STAGES)
    rules: list[RuleSpec] = Field(default_factory=list, max_length=MAX_RULES)


class PolicyDocument(RequestModel):
    apiVersion: Literal["lachesis.dev/v1"]  # noqa: N815 - the document's field name
    kind: Literal["Policy"]
    metadata: Metadata
    spec: PolicySpec
