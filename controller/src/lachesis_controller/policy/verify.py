"""Checks a whole rule set before it ships; a failing check blocks the change.

The checks follow sRoute's safety argument (thesis ch. 5): a detour must never lose a
write, must not loop, and must not carry one tenant's IO into another tenant's stage. A
rule an earlier rule always wins over is dead and usually a mistake: that is a warning.

Rules are checked in evaluation order (priority, then name), the order agents use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lachesis_controller.policy.match import covers, path_prefix_matches

# The control applications (detours/) a `header -> controller` detour may name as its
# target. Defined here, where it is checked: the applications sit above the policy layer.
CONTROLLER_APPS = ("approve", "readset")

WRITE_OPS = frozenset({"write", "create", "delete"})


@dataclass(frozen=True)
class Finding:
    check: str
    rules: tuple[str, ...]
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "rules": list(self.rules), "message": self.message}


@dataclass
class Report:
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class StageInfo:
    name: str
    owner: str | None
    shared_with: tuple[str, ...] = ()
    files: tuple[str, ...] = ()


def verify(
    rules: Sequence[Mapping[str, Any]],
    stages: Mapping[str, StageInfo],
    *,
    strict_targets: Iterable[str] = (),
) -> Report:
    """`rules`: dicts with name, priority, hosts, match, detours. `stages`: declared stages.
    Rules named in `strict_targets` must only send IO to declared stages and files (a
    policy's own rules); others may name stages the agents provide themselves."""
    ordered = sorted(rules, key=lambda r: (r["priority"], r["name"]))
    strict = set(strict_targets)
    known_files = {f for s in stages.values() for f in s.files}
    report = Report()
    for rule in ordered:
        _check_writes(rule, stages, known_files, rule["name"] in strict, report)
        _check_isolation(rule, stages, report)
        _check_controller(rule, report)
        _check_header_targets(rule, report)
    _check_loops(ordered, report)
    _check_shadowing(ordered, report)
    return report


def _writes(match: Mapping[str, Any]) -> bool:
    ops = match.get("ops")
    return ops is None or bool(WRITE_OPS & set(ops))


def _check_writes(
    rule: Mapping[str, Any],
    stages: Mapping[str, StageInfo],
    known_files: set[str],
    strict: bool,
    report: Report,
) -> None:
    if not _writes(rule["match"]):
        return
    detours = rule["detours"]
    name = rule["name"]
    if not any(d["what"] == "io" for d in detours) and not _asks_controller(detours):
        # A header-only detour hands the data to nobody: the write would be lost. (Unless
        # the controller is asked first: the IO waits, then goes to its original file.)
        report.errors.append(
            Finding(
                "write-loss",
                (name,),
                f"rule {name!r} matches writes but detours only their headers; add an io detour",
            )
        )
    if not strict:
        return
    for detour in detours:
        if detour["what"] == "header":
            # A header log or the controller: no data goes there, so it is not an endpoint.
            continue
        to = detour["to"]
        if to["kind"] == "stage" and to["target"] not in stages:
            report.errors.append(
                Finding(
                    "write-loss",
                    (name,),
                    f"rule {name!r} sends IO to stage {to['target']!r}, which no policy declares",
                )
            )
        elif to["kind"] == "file" and to["target"] not in known_files:
            report.errors.append(
                Finding(
                    "write-loss",
                    (name,),
                    f"rule {name!r} sends IO to file {to['target']!r}, which no stage declares",
                )
            )


def _asks_controller(detours: Sequence[Mapping[str, Any]]) -> bool:
    """The first detour sends the header to the controller: the switch holds each IO until
    the application answers (agents/fs/src/detour.rs)."""
    return bool(detours) and detours[0]["what"] == "header" and detours[0]["to"]["kind"] == "controller"


def _check_controller(rule: Mapping[str, Any], report: Report) -> None:
    name = rule["name"]
    for index, detour in enumerate(rule["detours"]):
        to = detour["to"]
        if to["kind"] != "controller":
            continue
        if detour["what"] == "io":
            report.errors.append(
                Finding(
                    "controller",
                    (name,),
                    f"rule {name!r} detours[{index}]: the controller takes IO headers, not IO; use what: header",
                )
            )
        elif to["target"] not in CONTROLLER_APPS:
            report.errors.append(
                Finding(
                    "controller",
                    (name,),
                    f"rule {name!r} detours[{index}].to.target: no controller application "
                    f"{to['target']!r}; known: {', '.join(sorted(CONTROLLER_APPS))}",
                )
            )


def _check_header_targets(rule: Mapping[str, Any], report: Report) -> None:
    # A stage takes IO, not headers: agents refuse such a rule, so it would never install.
    name = rule["name"]
    for index, detour in enumerate(rule["detours"]):
        to = detour["to"]
        if detour["what"] == "header" and to["kind"] == "stage":
            report.errors.append(
                Finding(
                    "header-target",
                    (name,),
                    f"rule {name!r} detours[{index}]: stage {to['target']!r} takes IO, not headers; "
                    "send headers to a file (a header log) or the controller, or use what: io",
                )
            )


def _check_isolation(rule: Mapping[str, Any], stages: Mapping[str, StageInfo], report: Report) -> None:
    tenant = rule["match"].get("tenant")
    for detour in rule["detours"]:
        to = detour["to"]
        stage = stages.get(to["target"]) if to["kind"] == "stage" else None
        if stage is None or stage.owner is None:
            continue
        if tenant is None:
            report.errors.append(
                Finding(
                    "isolation",
                    (rule["name"],),
                    f"rule {rule['name']!r} sends every tenant's IO to stage {stage.name!r} of tenant "
                    f"{stage.owner!r}; match one tenant or make the stage shared",
                )
            )
        elif tenant != stage.owner and tenant not in stage.shared_with:
            report.errors.append(
                Finding(
                    "isolation",
                    (rule["name"],),
                    f"rule {rule['name']!r} sends tenant {tenant!r}'s IO to stage {stage.name!r} of "
                    f"tenant {stage.owner!r}, which does not share it with {tenant!r}",
                )
            )


def _check_loops(ordered: Sequence[Mapping[str, Any]], report: Report) -> None:
    # Edge: a rule matching paths under P sends IO to file T; T is then matched by every
    # rule whose prefix T falls under. A cycle means IO is detoured forever.
    edges: list[tuple[str, str, str]] = []  # (rule, from prefix, to file)
    for rule in ordered:
        prefix = rule["match"].get("path_prefix")
        if prefix is None:
            continue
        for detour in rule["detours"]:
            if detour["what"] == "io" and detour["to"]["kind"] == "file":
                edges.append((rule["name"], prefix, detour["to"]["target"]))
    reported: set[frozenset[str]] = set()
    for start_rule, _prefix, target in edges:
        path = _cycle_from(start_rule, target, edges)
        if path and frozenset(path) not in reported:
            reported.add(frozenset(path))
            report.errors.append(
                Finding(
                    "loop",
                    tuple(path),
                    "detour loop through rules " + " -> ".join(path + [path[0]]),
                )
            )


def _cycle_from(start: str, target: str, edges: list[tuple[str, str, str]]) -> list[str] | None:
    stack = [(target, [start])]
    seen: set[str] = set()
    while stack:
        file, path = stack.pop()
        for rule, prefix, nxt in edges:
            if not path_prefix_matches(prefix, file):
                continue
            if rule == start:
                return path
            if rule not in seen:
                seen.add(rule)
                stack.append((nxt, path + [rule]))
    return None


def _covers(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> bool:
    """Whether every IO `later` matches is matched by `earlier` too, on every host of later."""
    ha, hb = earlier.get("hosts"), later.get("hosts")
    return covers(earlier["match"], later["match"]) and (ha is None or (hb is not None and set(hb) <= set(ha)))


def _check_shadowing(ordered: Sequence[Mapping[str, Any]], report: Report) -> None:
    for index, later in enumerate(ordered):
        for earlier in ordered[:index]:
            if _covers(earlier, later):
                report.warnings.append(
                    Finding(
                        "shadowed",
                        (later["name"], earlier["name"]),
                        f"rule {later['name']!r} never matches: rule {earlier['name']!r} comes first "
                        "and matches all its IO",
                    )
                )
                break
