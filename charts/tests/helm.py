"""The chart under test and helm: where helm is, and helm lint / helm template of a chart."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

CHARTS = Path(__file__).resolve().parents[1]
CHART = CHARTS / "lachesis"
ROOT = CHARTS.parent
# The Kubernetes version the manifests are rendered for and validated against: the newest
# kubernetes-validate ships schemas for.
KUBE_VERSION = "1.37.0"


def find_helm() -> str | None:
    """LACHESIS_HELM, else the one `./lachesis` installs, else PATH."""
    for candidate in (os.environ.get("LACHESIS_HELM"), str(ROOT / ".lachesis/tools/bin/helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("helm")


class Helm:
    """helm lint and helm template of a chart directory, with value files and --set flags."""

    def __init__(self, binary: str, chart: Path = CHART) -> None:
        self.binary = binary
        self.chart = chart

    def run(self, verb: str, *values: str | Path, sets: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        # The release is "lachesis" in namespace "storage"; object names follow from it.
        args = [
            self.binary,
            verb,
            *(["lachesis"] if verb == "template" else []),
            str(self.chart),
            "--namespace",
            "storage",
            "--kube-version",
            KUBE_VERSION,
            *(["--strict"] if verb == "lint" else []),
        ]
        for file in values:
            args += ["--values", str(file)]
        for assignment in sets:
            args += ["--set", assignment]
        return subprocess.run(args, capture_output=True, text=True, check=False)

    def render(self, *values: str | Path, sets: tuple[str, ...] = ()) -> list[dict]:
        result = self.run("template", *values, sets=sets)
        assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]
