"""HTTP client of the controller API that turns every failure into a CliError with the
right exit code and a message an operator can act on."""

from __future__ import annotations

from typing import Any

import httpx

from .errors import EXIT_BAD_INPUT, EXIT_FAILED, CliError
from .settings import Target


class Client:
    def __init__(self, target: Target, timeout_s: float = 10.0) -> None:
        headers = {"Accept": "application/json"}
        if target.token:
            headers["Authorization"] = f"Bearer {target.token}"
        self.url = target.url
        self._http = httpx.Client(base_url=target.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        ok: tuple[int, ...] = (),
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Send a request; a status in `ok` is returned even if it is an error status."""
        try:
            response = self._http.request(method, path, json=json, content=content, headers=headers)
        except httpx.TransportError as exc:
            raise CliError(
                f"cannot reach the controller at {self.url}: {exc or type(exc).__name__}", EXIT_FAILED
            ) from None
        if response.status_code < 400 or response.status_code in ok:
            return response
        raise CliError(describe_problem(response, f"{method} {path}"), _exit_code(response.status_code))

    def get(self, path: str) -> Any:
        return self.request("GET", path).json()

    def get_optional(self, path: str) -> Any | None:
        response = self.request("GET", path, ok=(404,))
        return None if response.status_code == 404 else response.json()


def _exit_code(status: int) -> int:
    return EXIT_BAD_INPUT if 400 <= status < 500 else EXIT_FAILED


def describe_problem(response: httpx.Response, what: str) -> str:
    """One line for the problem, then one per bad field."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        text = response.text.strip()[:200]
        return f"{what}: HTTP {response.status_code}{': ' + text if text else ''}"
    title = body.get("title") or f"HTTP {response.status_code}"
    lines = [f"{what}: {response.status_code} {title}: {body.get('detail', '')}".rstrip(": ")]
    errors = [e for e in body.get("errors") or [] if isinstance(e, dict)]
    # One error is already the detail; list them only when there are more.
    for error in errors if len(errors) > 1 else []:
        if isinstance(error, dict):
            lines.append(f"  {error.get('field', '?')}: {error.get('message', '')}")
    return "\n".join(lines)
