"""The `lachesis-controller` console script as an operator runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import free_port, wait_until


@pytest.mark.parametrize("access_log", ["1", "0"])
def test_serves_on_bind_and_stops_cleanly_on_sigterm(tmp_path: Path, redis_url: str, access_log: str) -> None:
    port = free_port()
    env = {
        # Let the child cache bytecode: without it, importing the app dominates this test.
        **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        "LACHESIS_BIND": f"127.0.0.1:{port}",
        "LACHESIS_REDIS_URL": redis_url,
        "LACHESIS_DATABASE_URL": "",  # the default: .lachesis/lachesis.db under the cwd
        "LACHESIS_ACCESS_LOG": access_log,
    }
    script = Path(sys.executable).parent / "lachesis-controller"
    process = subprocess.Popen(
        [str(script), "--insecure-no-auth"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                assert process.poll() is None, process.communicate()[1]
                return False

        wait_until(ready, timeout=60, what="the controller to become ready")
        assert (tmp_path / ".lachesis" / "lachesis.db").exists()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "controller stopped" in stderr
    assert "WARNING lachesis_controller.app: auth is OFF" in stderr
    # uvicorn's line per request (the readiness probes above), or none with LACHESIS_ACCESS_LOG=0.
    assert ("INFO uvicorn.access: 127.0.0.1:" in stderr and '"GET /readyz HTTP/1.1" 200' in stderr) == (
        access_log == "1"
    )


def test_bad_configuration_exits_2(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "lachesis-controller"
    result = subprocess.run(
        [str(script)],
        cwd=tmp_path,
        env={**os.environ, "LACHESIS_BIND": "nonsense"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "LACHESIS_BIND" in result.stderr
