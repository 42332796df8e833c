"""The SQLite database and its -wal and -shm files are readable by their owner only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sqlalchemy import text

from lachesis_controller.db import make_engine, migrate


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_database_files_are_created_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state" / "lachesis.db"
    previous = os.umask(0o022)  # the usual umask: world-readable files
    try:
        engine = make_engine(f"sqlite:///{path}")
        migrate(engine)
        with engine.connect() as connection:  # holds the -wal and -shm open
            connection.execute(text("SELECT 1"))
            files = [path, path.with_name("lachesis.db-wal"), path.with_name("lachesis.db-shm")]
            assert all(f.exists() for f in files)
            assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        engine.dispose()
    finally:
        os.umask(previous)
    assert mode(path.parent) == 0o700


def test_a_world_readable_database_is_tightened_at_start(tmp_path: Path) -> None:
    path = tmp_path / "lachesis.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    engine.dispose()
    path.chmod(0o644)
    make_engine(f"sqlite:///{path}").dispose()
    assert mode(path) == 0o600
