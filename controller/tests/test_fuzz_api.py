"""Property-based run of schemathesis against the live OpenAPI document: no request the
schema allows (or nearly allows) may get a 500 or a response that breaks the schema.

Bounded so it stays a unit test: a fixed seed (derandomize), 30 examples per operation.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from test_cli import serve

from lachesis_controller.config import Settings


@pytest.fixture
def live_url(settings: Settings) -> Iterator[str]:
    yield from serve(settings)


# schemathesis' own pytest integration does not work with pytest 9, so the operations are
# walked here and each one gets its own bounded hypothesis run.
def test_no_server_errors_and_responses_match_the_schema(live_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{live_url}/openapi.json")
    failures: list[str] = []
    operations = 0
    statuses: dict[int, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @settings(
            max_examples=30,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            response = case.call_and_validate(checks=[not_a_server_error, response_schema_conformance])
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        try:
            run()
        except Exception as exc:  # noqa: BLE001 - collect every operation's failure
            failures.append(f"{operation.label}: {exc}")
    assert operations >= 15
    # Both sides of the API were exercised: accepted requests and refused ones.
    assert sum(n for code, n in statuses.items() if code < 300) >= 30, statuses
    assert sum(n for code, n in statuses.items() if 400 <= code < 500) >= 30, statuses
    assert not failures, "\n\n".join(failures)
