"""The guest suite's fixtures: one boot of the QEMU guest per run (`vm.run_guest`), whose
results every test reads, and the same engine runs on the host's measuring device."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from vm import missing, run_guest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "guest: needs the QEMU guest")


class Results:
    """A finished guest run's files."""

    def __init__(self, root: Path, console: str) -> None:
        self.root = root
        self.console = console

    def json(self, name: str) -> Any:
        path = self.root / name
        assert path.exists(), f"the guest wrote no {name}; {self.failures()}\n{self.console[-4000:]}"
        err = (self.root / f"{name}.err").read_text() if (self.root / f"{name}.err").exists() else ""
        text = path.read_text()
        assert text.strip(), f"{name} is empty; its stderr: {err[-2000:]}"
        return json.loads(text)

    def failures(self) -> str:
        f = self.root / "failed"
        return "failed steps: " + (f.read_text().strip().replace("\n", ", ") if f.exists() else "none")


@pytest.fixture(scope="session")
def guest(tmp_path_factory: pytest.TempPathFactory) -> Results:
    reuse = os.environ.get("LACHESIS_GUEST_RESULTS")
    if reuse:  # a developer re-reading one boot's results (python e2e/guest/vm.py DIR)
        assert (Path(reuse) / "done").exists(), f"{reuse}: not a finished guest run"
        return Results(Path(reuse), "")
    gone = missing()
    if gone:
        what = "cannot boot the guest, missing: " + "; ".join(gone)
        if os.environ.get("CI") == "true":
            pytest.fail(f"missing prerequisite under CI: {what}")
        pytest.skip(what)
    out = tmp_path_factory.mktemp("guest")
    proc = run_guest(out)
    assert (out / "done").exists(), f"the guest did not finish (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    return Results(out, proc.stderr)
