"""Settings read from the environment (LACHESIS_*), once, at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class ConfigError(ValueError):
    """A LACHESIS_* variable holds a value the controller cannot use."""


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str
    bind_host: str
    bind_port: int
    api_token: str | None
    rollout_timeout_s: float
    reconcile_interval_s: float
    # The dashboard's build output; in a checkout that is ui/dist beside controller/.
    ui_dir: Path = Path(__file__).resolve().parents[3] / "ui" / "dist"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
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
            **({"ui_dir": Path(env["LACHESIS_UI_DIR"])} if env.get("LACHESIS_UI_DIR") else {}),
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


def positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    """The variable as a number > 0, the default when unset; a ConfigError naming it otherwise."""
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be greater than 0")
    return value
