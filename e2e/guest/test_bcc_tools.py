"""The bcc operator tools (ebpf/tools) against the agent's libbpf counters (lachesis-top's
standalone mode loads the same programs the agent does) on one fio run in two tenant
cgroups, in the guest, where the kernel's headers are installed; and on a host without
headers, a one-line refusal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "ebpf" / "tools"
# in_guest.sh: tenant a reads 3000 x 4 KiB, tenant b writes 1000 x 16 KiB, O_DIRECT.
RUNS = {"a": ("read", 3000, 4096), "b": ("write", 1000, 16384)}


@pytest.mark.parametrize("tool", ["bitesize", "biolatency"])
def test_bcc_tool_counts_match_the_libbpf_block_layer(guest, tool) -> None:
    ours = guest.json("tool-top.json")
    bcc = guest.json(f"tool-{tool}.json")
    for tenant, (op, ios, bs) in RUNS.items():
        fio = guest.json(f"fio-{tenant}.json")["jobs"][0][op]
        assert fio["total_ios"] == ios
        block = ours[tenant]["block"][op]
        assert block["ops"] == ios and block["bytes"] == ios * bs
        assert bcc[tenant][op]["ops"] == block["ops"]
        assert bcc[tenant][op]["bytes"] == block["bytes"]
        other = "write" if op == "read" else "read"
        assert bcc[tenant][other]["ops"] == ours[tenant]["block"][other]["ops"] == 0
        if tool == "bitesize":
            assert bcc[tenant][op]["size_hist"] == {str(bs): ios}
        else:
            timed = sum(bcc[tenant][op].get("latency_us_hist", {}).values())
            assert timed + bcc[tenant][op]["unmatched"] == ios
            assert timed > 0
            # The libbpf side times every bio it counted.
            assert block["latency_samples"] == ios


def test_tools_say_in_one_line_why_they_cannot_run_without_headers(monkeypatch) -> None:
    sys.path.insert(0, str(TOOLS))
    import tenants

    monkeypatch.setattr(tenants.platform, "release", lambda: "0.0.0-no-such-kernel")
    why = tenants.headers_missing()
    assert why is not None and "0.0.0-no-such-kernel" in why and "\n" not in why
    monkeypatch.undo()
    if tenants.headers_missing() is None:
        return  # this host has the headers: the tools would run here
    # This host lacks them (ours do): each tool exits 1 with that one line and prints nothing.
    for tool in ("tenant_bitesize.py", "tenant_biolatency.py"):
        out = subprocess.run(
            [sys.executable, str(TOOLS / tool), "--cgroup", "a=/"], capture_output=True, text=True, input=""
        )
        assert out.returncode == 1
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot run: no kernel headers" in lines[0]
        assert out.stdout == ""
