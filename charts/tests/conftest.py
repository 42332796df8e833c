"""The chart suite's fixtures: the helm binary (missing: skip, or fail under CI=true)."""

from __future__ import annotations

import os

import pytest
from helm import Helm, find_helm


@pytest.fixture(scope="session")
def helm_bin() -> str:
    found = find_helm()
    if found is None:
        message = "helm is not installed (./lachesis install puts it in .lachesis/tools/bin)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def helm(helm_bin: str) -> Helm:
    return Helm(helm_bin)
