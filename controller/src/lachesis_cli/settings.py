"""Where the controller is and how to authenticate to it.

Environment first (LACHESIS_URL, LACHESIS_TOKEN), then the files `./lachesis up` leaves
in .lachesis/ (under LACHESIS_HOME when set, then under the current directory).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Target:
    url: str
    token: str | None


def _state_dirs(env: Mapping[str, str], cwd: Path) -> list[Path]:
    dirs = []
    home = env.get("LACHESIS_HOME")
    if home:
        # LACHESIS_HOME may name the checkout (holding .lachesis/) or .lachesis itself.
        dirs += [Path(home) / ".lachesis", Path(home)]
    dirs.append(cwd / ".lachesis")
    return dirs


def _read_first(name: str, env: Mapping[str, str], cwd: Path) -> str | None:
    for directory in _state_dirs(env, cwd):
        path = directory / name
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        if value:
            return value
    return None


def resolve(
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Target:
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    resolved = url or env.get("LACHESIS_URL") or _read_first("controller-url", env, cwd) or DEFAULT_URL
    token = env.get("LACHESIS_TOKEN") or _read_first("token", env, cwd)
    return Target(url=resolved.rstrip("/"), token=token)
