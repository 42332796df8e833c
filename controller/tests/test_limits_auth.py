"""Auth is never off by accident: without LACHESIS_API_TOKEN the controller starts only when
told --insecure-no-auth (or LACHESIS_INSECURE_NO_AUTH=1). test_server.py starts it so and
checks the warning it logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lachesis_controller.config import ConfigError, Settings

SCRIPT = Path(sys.executable).parent / "lachesis-controller"


def _env_without_token(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"LACHESIS_API_TOKEN", "LACHESIS_INSECURE_NO_AUTH"}}
    return env | extra


def test_settings_without_a_token_are_refused_unless_auth_is_off_on_purpose() -> None:
    with pytest.raises(ConfigError, match="LACHESIS_API_TOKEN is not set.*--insecure-no-auth"):
        Settings.from_env({})
    assert Settings.from_env({"LACHESIS_API_TOKEN": "s3cret"}).insecure_no_auth is False
    assert Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1"}).api_token is None
    with pytest.raises(ConfigError, match="LACHESIS_INSECURE_NO_AUTH='maybe'"):
        Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "maybe"})
    with pytest.raises(ConfigError, match="LACHESIS_API_TOKEN is not set"):
        Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "0"})


@pytest.mark.parametrize(
    ("name", "value"),
    [("LACHESIS_MAX_BODY_BYTES", "0"), ("LACHESIS_MAX_BODY_BYTES", "1.5"), ("LACHESIS_MAX_BODY_DEPTH", "-3")],
)
def test_bad_limits_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({"LACHESIS_API_TOKEN": "s3cret", name: value})


def test_limits_are_configurable() -> None:
    settings = Settings.from_env(
        {"LACHESIS_API_TOKEN": "s3cret", "LACHESIS_MAX_BODY_BYTES": "2048", "LACHESIS_MAX_BODY_DEPTH": "8"}
    )
    assert (settings.max_body_bytes, settings.max_body_depth) == (2048, 8)


def test_controller_without_a_token_exits_2_and_says_why(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT)], cwd=tmp_path, env=_env_without_token(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "LACHESIS_API_TOKEN is not set" in result.stderr and "--insecure-no-auth" in result.stderr
    assert not (tmp_path / ".lachesis").exists()


def test_unknown_option_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT), "--no-auth"], cwd=tmp_path, env=_env_without_token(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--no-auth" in result.stderr
