"""The placement broker, its closed-form model, and its prediction against the simulated SSD
(`lachesis-devsim`, built from agents/device)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lachesis_controller.placement import Geometry, PlacementError, Stream, assign, devsim, naive, predict
from lachesis_controller.placement import dlwa as model

REPO = Path(__file__).resolve().parents[2]


def two_tenants(trim: bool = True) -> list[Stream]:
    """Two tenants with half the device each: 4% of it small-object buckets rewritten at
    random, 96% a large-object log, half of the writes each (the FDP paper's setup twice)."""
    return [
        s for t in ("a", "b") for s in (Stream(t, "set-assoc", 0.02, 0.25), Stream(t, "loc", 0.48, 0.25, trimmed=trim))
    ]


def measured(streams: list[Stream], handles: dict[str, int], op: float, n_handles: int) -> float:
    """The full-size device (4× the prediction's pages per reclaim unit), another seed, longer."""
    body = devsim.request(
        streams,
        handles,
        Geometry(reclaim_units=1024, pages_per_ru=256, overprovisioning=op, handles=n_handles),
        seed=7,
        warmup_turns=3,
        measure_turns=6,
    )
    return float(devsim.run(body)["dlwa"])


def test_closed_form_matches_the_rust_model() -> None:
    assert model.live_fraction(2.0) == pytest.approx(0.2031878699799796, abs=1e-12)
    assert model.dlwa(1.0) is None and model.dlwa(float("nan")) is None
    assert model.dlwa(1.1) == pytest.approx(5.677, abs=1e-3)  # docs/benchmarks/device.md


def test_distinct_handles_while_they_last() -> None:
    streams = two_tenants()
    p = assign(streams, 8, 0.1)
    assert sorted(p.handles.values()) == [0, 1, 2, 3] and p.shared == []


def test_sharing_keeps_patterns_apart_and_pairs_similar_rates() -> None:
    streams = [
        Stream("a", "set-assoc", 0.02, 0.3),
        Stream("b", "set-assoc", 0.02, 0.28),
        Stream("c", "kset", 0.1, 0.02),
        Stream("a", "loc", 0.3, 0.2),
        Stream("b", "loc", 0.3, 0.1),
        Stream("c", "klog", 0.2, 0.1),
    ]
    p = assign(streams, 4, 0.1)
    assert len(set(p.handles.values())) == 4
    groups = [{s.name for s in g} for g in p.groups(streams)]
    for g in groups:  # never a log next to random rewrites
        assert len({s.pattern for s in streams if s.name in g}) == 1
    assert {"a/set-assoc", "b/set-assoc"} in groups  # close rates (15, 14) together; c/kset (0.2) alone
    assert {"c/kset"} in groups
    assert p.shared and all("share handle" in s.reason for s in p.shared)


def test_one_handle_mixes_and_says_so() -> None:
    p = assign(two_tenants(), 1, 0.1)
    assert set(p.handles.values()) == {0}
    assert len(p.shared) == 1 and "only one" in p.shared[0].reason


@pytest.mark.parametrize(
    ("streams", "message"),
    [
        ([Stream("a", "loc", 0.6, 0.5), Stream("b", "loc", 0.6, 0.5)], "more than the device"),
        ([Stream("a", "loc", 0.2, 0.5), Stream("a", "loc", 0.2, 0.5)], "a/loc appear more than once"),
        ([Stream("a", "loc", 0.0, 0.5)], "space must be in"),
    ],
)
def test_bad_streams_are_refused(streams: list[Stream], message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        assign(streams, 4, 0.1)


def test_eight_handles_keep_dlwa_near_one(simulator: Path) -> None:
    streams = two_tenants()
    p = predict(streams, Geometry(handles=8, overprovisioning=0.10))
    assert p.predicted_by == "simulator" and p.warnings == []
    assert measured(streams, p.placement.handles, 0.10, 8) <= 1.1
    assert p.predicted_dlwa <= 1.1


@pytest.mark.parametrize(("op", "trim"), [(0.10, True), (0.10, False), (0.03, False)])
def test_three_handles_broker_beats_naive_and_predicts_within_15_percent(
    simulator: Path, op: float, trim: bool
) -> None:
    streams = two_tenants(trim)
    p = predict(streams, Geometry(handles=3, overprovisioning=op))
    assert p.placement.shared and p.warnings  # four streams, three handles: reported
    broker = measured(streams, p.placement.handles, op, 3)
    baseline = measured(streams, naive(streams, 3, op).handles, op, 3)
    assert broker < baseline / 1.5
    assert abs(p.predicted_dlwa - broker) / broker <= 0.15
    if op < 0.05:
        # Where the closed form's assumption breaks (open and reserved units eat the spare
        # space) it is more than 15% off, which is why the prediction runs the simulator.
        assert abs(p.model_dlwa - broker) / broker > 0.15


def test_without_the_simulator_the_prediction_says_it_is_the_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LACHESIS_DEVSIM", str(tmp_path / "absent"))
    monkeypatch.setattr(devsim, "REPO", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    p = predict(two_tenants(), Geometry(handles=3, overprovisioning=0.1))
    assert p.predicted_by == "model" and p.predicted_dlwa == p.model_dlwa
    assert any("simulator not used" in w for w in p.warnings)


def test_devsim_rejects_bad_input_with_exit_2(simulator: Path) -> None:
    for body, text in [
        ("{", "bad input"),
        (
            '{"device": {"reclaim_units": 256, "overprovisioning": 0.1, "handles": 2}, "streams": '
            '[{"pattern": "random", "space": 0.5, "writes": 1, "handle": 9}]}',
            "streams[0].handle 9",
        ),
        (
            '{"device": {"reclaim_units": 256, "overprovisioning": 0.1, "handles": 2}, "streams": '
            '[{"pattern": "random", "space": 0.5, "writes": 0.5, "handle": 0}]}',
            "sum to 1",
        ),
    ]:
        proc = subprocess.run([str(simulator)], input=body, capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr
        assert proc.stdout == ""
