"""`lachesis-cli`: apply, get, delete and status against the controller's REST API.

Exit codes: 0 done; 1 the controller is unreachable or failed, or a rollout failed or
timed out; 2 bad input (file, arguments, or the controller refused the request).
"""

from __future__ import annotations

import json
import os
import re
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from . import declared, documents, output
from .client import Client, describe_problem
from .errors import EXIT_FAILED, CliError
from .settings import resolve

app = typer.Typer(
    name="lachesis-cli",
    help="Operate a Lachesis controller: apply tenants and rules, watch rollouts, inspect hosts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

FINAL_STATES = {"succeeded", "failed", "timed_out"}


class Format(str, Enum):
    table = "table"
    json = "json"


class Kind(str, Enum):
    hosts = "hosts"
    tenants = "tenants"
    rules = "rules"
    rollouts = "rollouts"


# Singular forms are accepted too: `get rule r1` reads better than `get rules r1`.
KIND_ALIASES = {k.value: k.value for k in Kind} | {k.value[:-1]: k.value for k in Kind}
DELETABLE = {"tenants", "rules"}

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url", help="Controller URL (default: LACHESIS_URL, .lachesis/controller-url, http://127.0.0.1:8080)"
    ),
]
OutputOption = Annotated[Format, typer.Option("--output", "-o", help="table or json")]
WaitOption = Annotated[
    float, typer.Option("--wait", min=0, help="Seconds to wait for the rollout to finish (0: don't wait)")
]


def _client(url: str | None) -> Client:
    return Client(resolve(url))


def _fail(exc: CliError) -> typer.Exit:
    typer.echo(f"error: {exc.message}", err=True)
    return typer.Exit(exc.exit_code)


def _kind(value: str) -> str:
    kind = KIND_ALIASES.get(value.lower())
    if kind is None:
        raise CliError(f"unknown kind {value!r}: use one of {', '.join(k.value for k in Kind)}")
    return kind


@app.command()
def apply(
    file: Annotated[Path, typer.Option("--file", "-f", help="YAML or JSON file of Tenant, Rule and Policy documents")],
    wait: WaitOption = 10.0,
    url: UrlOption = None,
) -> None:
    """Create or update the tenants and rules in FILE, then wait for their rollouts."""
    try:
        docs = documents.load(file)
        # Tenants first: a policy or rule in the same file may name one of them.
        docs.sort(key=lambda d: {"Tenant": 0, documents.POLICY: 1}.get(d.kind, 2))
        with _client(url) as client:
            rollout_ids = [rid for doc in docs if (rid := _apply_one(client, doc))]
            ok = _wait_all(client, rollout_ids, wait)
    except CliError as exc:
        raise _fail(exc) from None
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _apply_policy(client: Client, doc: documents.Document) -> str | None:
    assert doc.text is not None
    try:
        result = client.request(
            "POST",
            "/api/v1/policies",
            content=doc.text.encode(),
            headers={"content-type": "application/yaml"},
        ).json()
    except CliError as exc:
        raise CliError(f"{doc.where}: {doc.label}: {exc.message}", exc.exit_code) from None
    for warning in result.get("warnings", []):
        typer.echo(f"{doc.label}: warning: {warning.get('message')}", err=True)
    typer.echo(f"{doc.label} applied as version {result['version']}, rollout {result['rollout_id']}")
    return str(result["rollout_id"])


def _apply_one(client: Client, doc: documents.Document) -> str | None:
    if doc.kind == documents.POLICY:
        return _apply_policy(client, doc)
    path = f"/api/v1/{doc.collection}/{doc.name}"
    try:
        current = client.get_optional(path)
        if current is None:
            result = client.request("POST", f"/api/v1/{doc.collection}", json=doc.spec).json()
            verb = "created"
        elif _same(doc.spec, current):
            typer.echo(f"{doc.label} unchanged")
            return None
        else:
            result = client.request("PUT", path, json=doc.spec).json()
            verb = "updated"
    except CliError as exc:
        raise CliError(f"{doc.where}: {doc.label}: {exc.message}", exc.exit_code) from None
    typer.echo(f"{doc.label} {verb}, rollout {result['rollout_id']}")
    return str(result["rollout_id"])


def _same(spec: dict[str, Any], current: dict[str, Any]) -> bool:
    # Fields a spec may leave out, with the value the server then stores.
    defaults = {"description": None, "hosts": None}
    return all(
        spec.get(key, defaults.get(key)) == current.get(key) for key in set(spec) | (set(defaults) & set(current))
    )


def _wait_all(client: Client, rollout_ids: list[str], wait_s: float) -> bool:
    """Print each rollout's outcome; False if any failed or timed out."""
    if not rollout_ids or wait_s <= 0:
        return True
    deadline = time.monotonic() + wait_s
    ok = True
    for rollout_id in rollout_ids:
        rollout = client.get(f"/api/v1/rollouts/{rollout_id}")
        while rollout["state"] == "pending" and time.monotonic() < deadline:
            time.sleep(0.2)
            rollout = client.get(f"/api/v1/rollouts/{rollout_id}")
        _print_rollout(rollout)
        if rollout["state"] == "pending":
            typer.echo(f"rollout {rollout_id} still pending after {wait_s:g} s", err=True)
        elif rollout["state"] != "succeeded":
            ok = False
    return ok


def _print_rollout(rollout: dict[str, Any]) -> None:
    reason = f": {rollout['reason']}" if rollout.get("reason") else ""
    typer.echo(f"rollout {rollout['id']} {rollout['state']}{reason}")
    for target in rollout["targets"]:
        why = f" ({target['reason']})" if target.get("reason") else ""
        typer.echo(f"  {target['host_id']}: generation {target['generation']} {target['status']}{why}")


@app.command()
def get(
    kind: Annotated[str, typer.Argument(help="hosts, tenants, rules or rollouts")],
    name: Annotated[str | None, typer.Argument(help="One item by name (a rollout by id)")] = None,
    output_format: OutputOption = Format.table,
    url: UrlOption = None,
) -> None:
    """Show hosts, tenants, rules or rollouts."""
    try:
        collection = _kind(kind)
        with _client(url) as client:
            path = f"/api/v1/{collection}" + (f"/{name}" if name else "")
            data = client.get(path)
    except CliError as exc:
        raise _fail(exc) from None
    if output_format is Format.json:
        typer.echo(output.as_json(data))
        return
    items = data if isinstance(data, list) else [data]
    typer.echo(_render(collection, items))
    if collection == "rollouts" and name:
        for target_line in _target_lines(data):
            typer.echo(target_line)


def _render(collection: str, items: list[dict[str, Any]]) -> str:
    if collection == "hosts":
        return output.table(
            ["HOST", "ALIVE", "DESIRED", "ACKED", "AGENT", "LAST SEEN"],
            [
                [
                    h["id"],
                    output.alive(h["alive"]),
                    h["desired_generation"],
                    h["acked_generation"],
                    h["agent_version"],
                    h["last_seen"],
                ]
                for h in items
            ],
        )
    if collection == "tenants":
        return output.table(
            ["TENANT", "CLASSIFIERS", "DESCRIPTION"],
            [
                [
                    t["name"],
                    ", ".join(f"{c['kind']}={c['value']}" for c in t["classifiers"]) or "-",
                    t.get("description"),
                ]
                for t in items
            ],
        )
    if collection == "rules":
        return output.table(
            ["RULE", "PRIORITY", "HOSTS", "MATCH", "DETOURS"],
            [
                [
                    r["name"],
                    r["priority"],
                    ",".join(r["hosts"]) if r["hosts"] is not None else "*",
                    output.describe_match(r["match"]),
                    output.describe_detours(r["detours"]),
                ]
                for r in items
            ],
        )
    return output.table(
        ["ROLLOUT", "STATE", "CAUSE", "HOSTS", "CREATED"],
        [[r["id"], r["state"], r["cause"], len(r["targets"]), r["created_at"]] for r in items],
    )


def _target_lines(rollout: dict[str, Any]) -> list[str]:
    lines = []
    if rollout.get("reason"):
        lines.append(f"reason: {rollout['reason']}")
    if rollout["targets"]:
        lines.append("")
        lines.append(
            output.table(
                ["HOST", "GENERATION", "STATUS", "ACKED AT", "REASON"],
                [[t["host_id"], t["generation"], t["status"], t["acked_at"], t["reason"]] for t in rollout["targets"]],
            )
        )
    return lines


@app.command()
def delete(
    kind: Annotated[str, typer.Argument(help="tenant or rule")],
    name: Annotated[str, typer.Argument()],
    wait: WaitOption = 10.0,
    url: UrlOption = None,
) -> None:
    """Delete a tenant or rule, then wait for the rollout."""
    try:
        collection = _kind(kind)
        if collection not in DELETABLE:
            raise CliError(f"cannot delete {collection}: only tenants and rules")
        with _client(url) as client:
            result = client.request("DELETE", f"/api/v1/{collection}/{name}").json()
            typer.echo(f"{collection[:-1]}/{name} deleted, rollout {result['rollout_id']}")
            ok = _wait_all(client, [result["rollout_id"]], wait)
    except CliError as exc:
        raise _fail(exc) from None
    if not ok:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def status(output_format: OutputOption = Format.table, url: UrlOption = None) -> None:
    """Controller readiness, hosts and counts. Exits 1 unless the controller is ready."""
    try:
        with _client(url) as client:
            ready = client.request("GET", "/readyz", ok=(503,))
            hosts = client.get("/api/v1/hosts")
            tenants = client.get("/api/v1/tenants")
            rules = client.get("/api/v1/rules")
    except CliError as exc:
        raise _fail(exc) from None
    is_ready = ready.status_code == 200
    summary = {
        "controller": client.url,
        "ready": is_ready,
        "checks": ready.json().get("checks", {}),
        "tenants": len(tenants),
        "rules": len(rules),
        "hosts": hosts,
    }
    if output_format is Format.json:
        typer.echo(output.as_json(summary))
    else:
        checks = ", ".join(f"{k} {v}" for k, v in summary["checks"].items())
        typer.echo(f"controller  {client.url}")
        typer.echo(f"ready       {'yes' if is_ready else 'no'} ({checks})")
        typer.echo(f"tenants     {len(tenants)}")
        typer.echo(f"rules       {len(rules)}")
        typer.echo(f"hosts       {len(hosts)}")
        if hosts:
            typer.echo("")
            typer.echo(_render("hosts", hosts))
    if not is_ready:
        typer.echo(describe_problem(ready, "GET /readyz"), err=True)
        raise typer.Exit(EXIT_FAILED)


SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)?\s*$")


def _size(value: str) -> int:
    match = SIZE.match(value)
    if match is None:
        raise typer.BadParameter(f"{value!r} is not a size like 64MiB, 1GiB or 4096")
    n = int(match.group(1)) << {None: 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[match.group(2)]
    if not (1 << 20) <= n <= (1 << 50):
        raise typer.BadParameter(f"{value!r} is outside 1MiB..1PiB")
    return n


def _home() -> Path:
    """The deployment's state directory (`./lachesis` sets LACHESIS_HOME to it)."""
    home = Path(os.environ.get("LACHESIS_HOME") or ".")
    return home if (home / "mnt").exists() else home / ".lachesis"


def _default_traces() -> list[Path]:
    """The shared real traces (`./lachesis demo` names their folder in LACHESIS_TRACES), one
    file per trace: the oracleGeneral copy of the CloudPhysics trace is the same trace."""
    root = Path(os.environ.get("LACHESIS_TRACES") or "../shared/traces")
    return sorted(root.glob("*.csv")) + sorted(root.glob("arc/*.lis.zst"))


@app.command()
def demo(
    traces: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Trace files (ARC .lis/.lis.zst, oracleGeneral, CloudPhysics CSV, MSR); default: the shared traces"
        ),
    ] = None,
    seconds: Annotated[float, typer.Option("--seconds", min=5, max=3600, help="Replay time of each phase")] = 45.0,
    cache_bytes: Annotated[
        str, typer.Option("--cache-bytes", help="Flash cache capacity the tenants share, e.g. 32MiB")
    ] = "32MiB",
    compare_equal_split: Annotated[
        bool, typer.Option("--compare-equal-split", help="First run the same replays with the cache split equally")
    ] = False,
    output_format: OutputOption = Format.table,
    url: UrlOption = None,
) -> None:
    """Show the closed loop: one tenant per trace replays through the data path with its own
    flash cache stage; the allocation loop sizes the stages from the tenants' curves."""
    from .demo import run as demo_run
    from .demo.traces import TraceError

    size = _size(cache_bytes)
    paths = traces or _default_traces()
    if not paths:
        raise _fail(CliError("no traces given and none found in ../shared/traces"))
    try:
        with _client(url) as client:
            result = demo_run.run(client, _home(), paths, seconds, size, compare_equal_split)
    except TraceError as exc:
        raise _fail(CliError(str(exc))) from None
    except CliError as exc:
        raise _fail(exc) from None
    if output_format is Format.json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(output_demo(result))


def output_demo(result: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:5.1f}%"

    def mib(x: int | None) -> str:
        return "-" if x is None else f"{x / (1 << 20):8.1f}"

    lines = []
    phases = ([("equal split", result["equal_split"])] if "equal_split" in result else []) + [
        ("allocation loop", {"hit_ratio": result["loop"]["hit_ratio"], "tenants": result["tenants"]})
    ]
    for label, phase in phases:
        lines.append(f"{label}: aggregate hit ratio {pct(phase['hit_ratio'])}")
        lines.append(f"  {'tenant':<28} {'requests':>9} {'alloc MiB':>9} {'inst MiB':>9} {'hit':>7} {'predicted':>9}")
        for t in phase["tenants"]:
            lines.append(
                f"  {t['name']:<28} {t['requests']:>9} {mib(t['allocated_bytes'])} {mib(t['installed_bytes'])}"
                f" {pct(t['hit_ratio']):>7} {pct(t['predicted_hit_ratio']):>9}"
            )
    c = result.get("comparison")
    if c:
        share = "-" if c["gain_share"] is None else f"{100 * c['gain_share']:.0f}%"
        lines.append(
            f"loop vs equal split: measured gain {pct(c['measured_gain'])} "
            f"({pct(c['measured_gain_same_weights']).strip()} weighted as the prediction), the curves predict "
            f"{pct(c['predicted_gain'])} ({share} of it); installed = allocated: {c['installed_equals_allocated']}"
        )
    changes = result["loop"].get("size_changes") or []
    lines.append(
        f"size changes under the loop: {len(changes)}"
        + "".join(
            f"\n  {x['at_s']:6.1f} s {x['tenant']}: {mib(x['from_bytes']).strip()} -> {mib(x['to_bytes']).strip()} MiB"
            for x in changes
        )
    )
    lines.append("devices:")
    for d in result["devices"]:
        dlwa = "-" if d["dlwa"] is None else f"{d['dlwa']:.3f}"
        predicted = "-" if d["predicted_dlwa"] is None else f"{d['predicted_dlwa']:.3f}"
        lines.append(
            f"  {d['host']}/{d['name']} ({d['kind']}, {d['placement_handles']} handles): "
            f"DLWA {dlwa} measured, {predicted} predicted"
        )
    return "\n".join(lines)


hosts_app = typer.Typer(
    help="Enrol hosts (give an agent its own Redis user and streams) and decommission them.", no_args_is_help=True
)
app.add_typer(hosts_app, name="hosts")
app.add_typer(declared.app, name="declared")


@hosts_app.command("enroll")
def hosts_enroll(
    host_id: Annotated[str, typer.Argument(help="Host id the agent runs as (--host-id)")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the agent's Redis URL to this file (mode 0600) instead of stdout"),
    ] = None,
    url: UrlOption = None,
) -> None:
    """Create (or replace) the host's Redis user; print the agent's bus URL (secret included)."""
    try:
        with _client(url) as client:
            result = client.request("POST", f"/api/v1/hosts/{host_id}/enrollment").json()
    except CliError as exc:
        raise _fail(exc) from None
    if out is None:
        typer.echo(result["redis_url"])
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.touch(mode=0o600, exist_ok=True)
        out.chmod(0o600)
        out.write_text(result["redis_url"] + "\n")
    except OSError as exc:
        raise _fail(CliError(f"cannot write {out}: {exc.strerror}")) from None
    typer.echo(f"host {host_id} enrolled as Redis user {result['redis_user']}; its URL is in {out}")


@hosts_app.command("delete")
def hosts_delete(
    host_id: Annotated[str, typer.Argument(help="Host id to decommission")],
    url: UrlOption = None,
) -> None:
    """Decommission a host: its record, Redis user, keys and streams go, and pending rollouts
    stop waiting for it. Its agent can no longer connect."""
    try:
        with _client(url) as client:
            client.request("DELETE", f"/api/v1/hosts/{host_id}")
    except CliError as exc:
        raise _fail(exc) from None
    typer.echo(f"host {host_id} deleted")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
