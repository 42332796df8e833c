"""The demo's replayer paces a tenant open loop (`lachesis_cli.demo.replay.Pace`): reference i
is issued no earlier than i / rate after the start, and one that is late is not held at all,
so the request rate the allocation loop weighs is the trace's, not the cache's. A fake clock
drives it: no test here depends on how fast anything runs."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from lachesis_cli.demo.replay import Pace
from lachesis_cli.demo.run import REPLAY_IOPS, paced_rates


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_references_are_held_until_due_and_never_early() -> None:
    clock = FakeClock()
    pace = Pace(1000.0, clock=clock, sleep=clock.sleep)
    issued_at = []
    for i in range(5000):
        pace.wait(i)
        issued_at.append(clock.now)
        clock.now += 0.0002  # each IO takes 0.2 ms, faster than the pace
    assert all(t >= 100.0 + i / 1000.0 - 1e-9 for i, t in enumerate(issued_at))
    # Held to the pace: the last one issued when it was due, not before and not much after.
    assert issued_at[-1] == pytest.approx(100.0 + 4999 / 1000.0, abs=0.0003)


def test_a_late_replayer_is_not_held_until_it_has_caught_up() -> None:
    clock = FakeClock()
    pace = Pace(100.0, clock=clock, sleep=clock.sleep)
    pace.wait(0)
    clock.now += 5.0  # a stall: 500 references behind
    for i in range(1, 500):
        pace.wait(i)
    assert clock.slept == []
    pace.wait(600)
    assert clock.slept == [pytest.approx(1.0)]


@pytest.mark.parametrize("rate", [0.0, -5.0, math.inf, math.nan])
def test_a_rate_that_is_not_a_positive_number_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="--rate"):
        Pace(rate)


def test_the_replayer_refuses_a_bad_rate_with_a_usage_error(tmp_path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "lachesis_cli.demo.replay",
            "--refs",
            str(tmp_path / "none.npz"),
            "--file",
            str(tmp_path / "f"),
            "--cgroup",
            str(tmp_path),
            "--rate",
            "0",
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert "--rate must be a positive number" in p.stderr


def test_the_demo_shares_its_replay_rate_in_proportion_to_the_references() -> None:
    rates = paced_rates({"a": 30_000, "b": 10_000, "c": 0})
    assert rates["a"] == pytest.approx(3 * rates["b"])
    assert rates["a"] + rates["b"] == pytest.approx(REPLAY_IOPS)
    assert rates["c"] == 1.0  # a replayer with nothing sampled still has a valid rate
