from __future__ import annotations

from pathlib import Path

import pytest

from lachesis_controller.config import ConfigError, Settings


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1"})
    assert settings.database_url == f"sqlite:///{tmp_path}/.lachesis/lachesis.db"
    assert settings.redis_url == "redis://127.0.0.1:6380/0"
    assert (settings.bind_host, settings.bind_port) == ("127.0.0.1", 8080)
    assert settings.api_token is None
    assert settings.rollout_timeout_s == 30.0
    assert settings.access_log is True


@pytest.mark.parametrize(("value", "on"), [("0", False), ("false", False), ("1", True), ("", True)])
def test_access_log_is_a_setting(value: str, on: bool) -> None:
    settings = Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1", "LACHESIS_ACCESS_LOG": value})
    assert settings.access_log is on


def test_values_from_env() -> None:
    settings = Settings.from_env(
        {
            "LACHESIS_DATABASE_URL": "postgresql://u:p@db/lachesis",
            "LACHESIS_REDIS_URL": "redis://redis:6379/1",
            "LACHESIS_BIND": "0.0.0.0:9000",
            "LACHESIS_API_TOKEN": "s3cret",
            "LACHESIS_ROLLOUT_TIMEOUT_S": "2.5",
        }
    )
    assert settings.database_url == "postgresql://u:p@db/lachesis"
    assert settings.redis_url == "redis://redis:6379/1"
    assert (settings.bind_host, settings.bind_port) == ("0.0.0.0", 9000)
    assert settings.api_token == "s3cret"
    assert settings.rollout_timeout_s == 2.5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LACHESIS_BIND", "8080"),
        ("LACHESIS_BIND", "host:port"),
        ("LACHESIS_BIND", "host:70000"),
        ("LACHESIS_ROLLOUT_TIMEOUT_S", "soon"),
        ("LACHESIS_ROLLOUT_TIMEOUT_S", "0"),
        ("LACHESIS_LOG_LEVEL", "LOUD"),
        ("LACHESIS_ACCESS_LOG", "sometimes"),
        ("LACHESIS_ALLOCATION_STORAGE_BYTES_PER_S", "0"),
        # Eq. 5.2 divides by cache - storage: a storage as fast as the caches is refused.
        ("LACHESIS_ALLOCATION_STORAGE_BYTES_PER_S", "2e9"),
        ("LACHESIS_ALLOCATION_CACHE_BYTES_PER_S", "1e6"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: value})
