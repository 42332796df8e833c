"""Settings read from the environment (LACHESIS_*), once, at start-up."""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from lachesis_controller.validation.body_limits import MAX_BODY_BYTES, MAX_BODY_DEPTH
from lachesis_controller.validation.bounds import normal_path

Number = TypeVar("Number", int, float)


class ConfigError(ValueError):
    """A LACHESIS_* variable holds a value the controller cannot use."""


# The dashboard's build output; in a checkout that is ui/dist beside controller/.
_UI_DIR = Path(__file__).resolve().parents[3] / "ui" / "dist"


def _default_replica_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    bind_host: str
    bind_port: int
    api_token: str | None
    rollout_timeout_s: float
    reconcile_interval_s: float
    # Without api_token the API is open to anyone as an admin: only when asked for by name
    # (--insecure-no-auth, LACHESIS_INSECURE_NO_AUTH=1), never because a variable is unset.
    insecure_no_auth: bool = False
    max_body_bytes: int = MAX_BODY_BYTES
    max_body_depth: int = MAX_BODY_DEPTH
    # Host directories a tenant-scoped token's file endpoints may lie under, besides the
    # tenant's own path_prefix classifiers (auth/endpoint_roots.py).
    endpoint_roots: tuple[str, ...] = ()
    # Connections to Redis the controller may hold at once (REST calls, publications and one
    # per blocking consumer); callers beyond it wait for one (bus.make_redis).
    redis_max_connections: int = 64
    ui_dir: Path = _UI_DIR
    log_level: str = "INFO"
    # uvicorn's line per request at INFO (3% of a cached read's samples in the eighth round's
    # profile, docs/benchmarks/controller.md); off leaves it out.
    access_log: bool = True
    # Spans to stderr as well (observability/tracing.py).
    otel_console: bool = False
    # Where spans go over OTLP (HTTP/protobuf), from the standard OTEL_EXPORTER_OTLP_*
    # variables; None: not exported. Headers, timeout and compression the exporter reads itself.
    otlp_traces_endpoint: str | None = None
    # The allocation loop's timing (allocation/service.py): how often it runs, how long a
    # gain must last before it acts, and the smallest hit-ratio gain worth a rollout.
    allocation_interval_s: float = 5.0
    allocation_reaction_s: float = 15.0
    allocation_gain: float = 0.01
    # Sizes in whole units of the stages' region (allocation/units.py), and the seconds a new
    # allocation is expected to hold, over which refilling the space it moves is paid back.
    allocation_unit_bytes: int = 1 << 20
    allocation_refill_horizon_s: float = 60.0
    # Reaction times after a rollout during which a move must be a gain under its weights too.
    allocation_hold_reaction_times: float = 4.0
    # The bandwidths Eq. 5.2 sizes a qos stage owner's cache by (allocation/qos_guarantees.py):
    # the storage behind the caches and the caches themselves, bytes per second.
    allocation_storage_bytes_per_s: float = 250e6
    allocation_cache_bytes_per_s: float = 2e9
    # How long writes must be quiet before the read-set application restores a flow's
    # replica reads (detours/apps.py; 30 s as in the sRoute paper).
    readset_quiet_s: float = 30.0
    # The placement broker's simulator; None: the workspace's release build, else PATH.
    devsim: Path | None = None
    # Several replicas on one PostgreSQL (ha/lease.py): how often the leader lease is tried
    # or checked, and this replica's name (its own telemetry consumer group; unique per
    # process by default).
    lease_interval_s: float = 1.0
    replica_id: str = field(default_factory=_default_replica_id)
    # The sustainability model's flash assumptions (sustainability/model.py, docs/sustainability.md).
    # Rated endurance: the FairyWREN paper's ZNS SSD, "3.5 device writes per day for an
    # expected 5-year lifetime" (FairyWREN §6.1; McAllister thesis §5.4.1).
    flash_rated_dwpd: float = 3.5
    flash_rated_years: float = 5.0
    # How long a device serves before it is replaced anyway: the FDP study's system life
    # cycle T = 5 years (FDP in CacheLib §6.6, used in its Theorem 2, §4.2.1).
    flash_service_years: float = 5.0
    # Embodied kgCO2e per GB of SSD manufactured: 0.16 (FDP in CacheLib §6.6, after Tannu
    # and Nair, "The Dirty Secret of SSDs: Embodied Carbon").
    flash_kgco2e_per_gb: float = 0.16

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: str) -> Settings:
        """From `env` (the process environment by default), with `overrides` (variable name
        to value) on top."""
        env = {**(os.environ if env is None else env), **overrides}
        database_url = env.get("LACHESIS_DATABASE_URL") or _default_database_url()
        host, port = _parse_bind(env.get("LACHESIS_BIND") or "127.0.0.1:8080")
        return cls(
            database_url=database_url,
            redis_url=env.get("LACHESIS_REDIS_URL") or "redis://127.0.0.1:6380/0",
            bind_host=host,
            bind_port=port,
            # An empty token would make every request pass; treat it as "auth off" explicitly.
            api_token=env.get("LACHESIS_API_TOKEN") or None,
            rollout_timeout_s=positive_float(env, "LACHESIS_ROLLOUT_TIMEOUT_S", 30.0),
            reconcile_interval_s=positive_float(env, "LACHESIS_RECONCILE_INTERVAL_S", 1.0),
            insecure_no_auth=_flag(env, "LACHESIS_INSECURE_NO_AUTH"),
            max_body_bytes=positive_int(env, "LACHESIS_MAX_BODY_BYTES", MAX_BODY_BYTES),
            max_body_depth=positive_int(env, "LACHESIS_MAX_BODY_DEPTH", MAX_BODY_DEPTH),
            endpoint_roots=_roots(env, "LACHESIS_ENDPOINT_ROOTS"),
            redis_max_connections=positive_int(env, "LACHESIS_REDIS_MAX_CONNECTIONS", 64),
            ui_dir=Path(env["LACHESIS_UI_DIR"]) if env.get("LACHESIS_UI_DIR") else _UI_DIR,
            log_level=_log_level(env, "LACHESIS_LOG_LEVEL"),
            access_log=_flag(env, "LACHESIS_ACCESS_LOG", default=True),
            otel_console=env.get("LACHESIS_OTEL_CONSOLE") == "1",
            otlp_traces_endpoint=_otlp_traces_endpoint(env),
            allocation_interval_s=positive_float(env, "LACHESIS_ALLOCATION_INTERVAL_S", 5.0),
            allocation_reaction_s=positive_float(env, "LACHESIS_ALLOCATION_REACTION_S", 15.0),
            allocation_gain=positive_float(env, "LACHESIS_ALLOCATION_GAIN", 0.01),
            allocation_unit_bytes=positive_int(env, "LACHESIS_ALLOCATION_UNIT_BYTES", 1 << 20),
            allocation_refill_horizon_s=positive_float(env, "LACHESIS_ALLOCATION_REFILL_HORIZON_S", 60.0),
            allocation_hold_reaction_times=positive_float(env, "LACHESIS_ALLOCATION_HOLD_REACTION_TIMES", 4.0),
            **_bandwidths(env),
            readset_quiet_s=positive_float(env, "LACHESIS_READSET_QUIET_S", 30.0),
            devsim=Path(env["LACHESIS_DEVSIM"]) if env.get("LACHESIS_DEVSIM") else None,
            lease_interval_s=positive_float(env, "LACHESIS_LEASE_INTERVAL_S", 1.0),
            replica_id=(
                _replica_id(env["LACHESIS_REPLICA_ID"]) if env.get("LACHESIS_REPLICA_ID") else _default_replica_id()
            ),
            flash_rated_dwpd=positive_float(env, "LACHESIS_FLASH_RATED_DWPD", 3.5),
            flash_rated_years=positive_float(env, "LACHESIS_FLASH_RATED_YEARS", 5.0),
            flash_service_years=positive_float(env, "LACHESIS_FLASH_SERVICE_YEARS", 5.0),
            flash_kgco2e_per_gb=positive_float(env, "LACHESIS_FLASH_KGCO2E_PER_GB", 0.16),
        )

    def __post_init__(self) -> None:
        if self.api_token is None and not self.insecure_no_auth:
            raise ConfigError(
                "LACHESIS_API_TOKEN is not set: set it to the bootstrap admin's bearer token, or start "
                "with --insecure-no-auth (LACHESIS_INSECURE_NO_AUTH=1) to serve the API to anyone as an admin"
            )


def _default_database_url() -> str:
    state_dir = Path.cwd() / ".lachesis"
    return f"sqlite:///{state_dir / 'lachesis.db'}"


def _parse_bind(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"LACHESIS_BIND={value!r}: expected host:port, e.g. 127.0.0.1:8080")
    try:
        port_number = int(port)
    except ValueError:
        raise ConfigError(f"LACHESIS_BIND={value!r}: port {port!r} is not a number") from None
    if not 0 <= port_number <= 65535:
        raise ConfigError(f"LACHESIS_BIND={value!r}: port must be 0-65535")
    return host.strip("[]"), port_number


def _bandwidths(env: Mapping[str, str]) -> dict[str, float]:
    """The storage and cache bandwidths of Eq. 5.2, the storage's below the cache's (the
    equation divides by their difference)."""
    storage = positive_float(env, "LACHESIS_ALLOCATION_STORAGE_BYTES_PER_S", 250e6)
    cache = positive_float(env, "LACHESIS_ALLOCATION_CACHE_BYTES_PER_S", 2e9)
    if storage >= cache:
        raise ConfigError(
            f"LACHESIS_ALLOCATION_STORAGE_BYTES_PER_S ({storage:g}) must be below "
            f"LACHESIS_ALLOCATION_CACHE_BYTES_PER_S ({cache:g}): a cache slower than its storage "
            "cannot meet a bandwidth guarantee"
        )
    return {"allocation_storage_bytes_per_s": storage, "allocation_cache_bytes_per_s": cache}


def positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    """The variable as a number > 0, the default when unset; a ConfigError naming it otherwise."""
    return _positive(env, name, default, float, "a number")


def positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    """The variable as a whole number > 0, the default when unset; a ConfigError naming it otherwise."""
    return _positive(env, name, default, int, "a whole number")


def _positive(env: Mapping[str, str], name: str, default: Number, parse: Callable[[str], Number], what: str) -> Number:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected {what}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name}={raw!r}: expected a finite number")
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be greater than 0")
    return value


def _roots(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Colon-separated absolute, normal directories."""
    roots = [part for part in (env.get(name) or "").split(":") if part]
    for root in roots:
        try:
            normal_path(root)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None
    return tuple(roots)


def _otlp_traces_endpoint(env: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL the OpenTelemetry specification derives from the environment:
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(name)
        if protocol:
            if protocol != "http/protobuf":
                raise ConfigError(f"{name}={protocol!r}: the controller exports OTLP as http/protobuf only")
            break
    for name, suffix in (("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""), ("OTEL_EXPORTER_OTLP_ENDPOINT", "/v1/traces")):
        raw = (env.get(name) or "").strip()
        if not raw:
            continue
        url = urlsplit(raw)
        if url.scheme not in {"http", "https"} or not url.hostname:
            raise ConfigError(f"{name}={raw!r}: expected an http:// or https:// URL, e.g. http://127.0.0.1:4318")
        return raw.rstrip("/") + suffix if suffix else raw
    return None


def _replica_id(raw: str) -> str:
    # It becomes part of a Redis consumer group name and of log lines.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", raw):
        raise ConfigError(f"LACHESIS_REPLICA_ID={raw!r}: expected 1-63 letters, digits, '.', '_' or '-'")
    return raw


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(env: Mapping[str, str], name: str) -> str:
    # Checked here: logging would otherwise refuse it with a traceback, not an exit 2.
    level = (env.get(name) or "INFO").strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{name}={env[name]!r}: expected one of {', '.join(LOG_LEVELS)}")
    return level


def _flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """`name` as a yes/no setting; unset or empty is `default`."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in {"0", "false", "no"}:
        return False
    if raw in {"1", "true", "yes"}:
        return True
    raise ConfigError(f"{name}={env[name]!r}: expected 1 or 0")
