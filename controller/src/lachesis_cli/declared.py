"""`lachesis-cli declared`: declared maintenance IO jobs (DINGOS) through
`/api/v1/apps/declared-io`: declare what a job must read on a host and by when, list and show
jobs with their progress, pause, resume and cancel them. `./lachesis declare PATH...`
declares one on this machine's agent."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from .client import Client
from .errors import CliError
from .settings import resolve

URL = "/api/v1/apps/declared-io"
UrlOption = Annotated[str | None, typer.Option("--url", help="Controller URL")]

app = typer.Typer(help="Declared maintenance IO: jobs that read files by a deadline.", no_args_is_help=True)

_WITHIN = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def deadline_of(value: str, now: datetime | None = None) -> str:
    """`90m`, `2h`, `7d` from now, or an RFC 3339 time as it is."""
    match = _WITHIN.match(value)
    if match:
        seconds = int(match[1]) * _UNITS[match[2]]
        return ((now or datetime.now(UTC)) + timedelta(seconds=seconds)).isoformat()
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"--by {value!r}: expected a duration (90m, 2h, 7d) or an RFC 3339 time") from None
    if parsed.tzinfo is None:
        raise CliError(f"--by {value!r}: give a time zone (e.g. Z)")
    return value


def _fail(exc: CliError) -> typer.Exit:
    typer.echo(f"error: {exc.message}", err=True)
    return typer.Exit(exc.exit_code)


def _line(job: dict[str, Any]) -> str:
    declared = job["bytes_declared"]
    saved = ""
    if declared:
        saved = f", {100 * (job['foreground_bytes'] + job['shared_bytes']) // declared}% not read"
    return (
        f"{job['id']}  {job['host']}  {job['tenant']}  {job['state']}  by {job['deadline']}  "
        f"declared {declared if declared is not None else '-'}  dispatcher {job['dispatched_bytes']}  "
        f"foreground {job['foreground_bytes']}{saved}"
    )


@app.command("create")
def create(
    paths: Annotated[list[str], typer.Argument(help="Files or directories to read (host paths under a mount)")],
    host: Annotated[str, typer.Option("--host", help="The host whose agent reads them")],
    tenant: Annotated[str, typer.Option("--tenant", help="Whose data it is")],
    by: Annotated[str, typer.Option("--by", help="Deadline: a duration from now (90m, 2h, 7d) or an RFC 3339 time")],
    pace: Annotated[str, typer.Option("--pace", help="deadline or budget")] = "deadline",
    paused: Annotated[bool, typer.Option("--paused", help="Declare it paused")] = False,
    rate: Annotated[int | None, typer.Option("--rate", help="The job's cap, bytes/s")] = None,
    job_id: Annotated[str | None, typer.Option("--id", help="Job id (default: the controller names it)")] = None,
    url: UrlOption = None,
) -> None:
    """Declare a job: PATHS read on HOST by the deadline."""
    try:
        body = {
            "host": host,
            "tenant": tenant,
            "deadline": deadline_of(by),
            "pace": pace,
            "paused": paused,
            "rate_bytes_per_s": rate,
            "id": job_id,
            "files": [{"path": p} for p in paths],
        }
        with Client(resolve(url)) as client:
            job = client.request("POST", URL, json=body).json()
    except CliError as exc:
        raise _fail(exc) from None
    typer.echo(f"declared {job['id']} on {job['host']}, due {job['deadline']}")


@app.command("list")
def list_jobs(
    host: Annotated[str | None, typer.Option("--host")] = None,
    output_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
    url: UrlOption = None,
) -> None:
    """The declared jobs, newest first, with their progress."""
    try:
        with Client(resolve(url)) as client:
            jobs = client.get(URL + (f"?host={host}" if host else ""))
    except CliError as exc:
        raise _fail(exc) from None
    typer.echo(json.dumps(jobs, indent=2) if output_json else "\n".join(_line(j) for j in jobs) or "no declared jobs")


@app.command("show")
def show(job_id: str, url: UrlOption = None) -> None:
    """One job as JSON (counters, checksums once done)."""
    try:
        with Client(resolve(url)) as client:
            typer.echo(json.dumps(client.get(f"{URL}/{job_id}"), indent=2))
    except CliError as exc:
        raise _fail(exc) from None


def _change(job_id: str, method: str, body: dict[str, Any] | None, url: str | None) -> None:
    try:
        with Client(resolve(url)) as client:
            typer.echo(_line(client.request(method, f"{URL}/{job_id}", json=body).json()))
    except CliError as exc:
        raise _fail(exc) from None


@app.command("pause")
def pause(job_id: str, url: UrlOption = None) -> None:
    """The agent's dispatcher stops reading for it (foreground reads still count)."""
    _change(job_id, "PATCH", {"paused": True}, url)


@app.command("resume")
def resume(job_id: str, url: UrlOption = None) -> None:
    _change(job_id, "PATCH", {"paused": False}, url)


@app.command("cancel")
def cancel(job_id: str, url: UrlOption = None) -> None:
    _change(job_id, "DELETE", None, url)
