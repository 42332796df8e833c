import { useHosts, useReadiness, useRollouts, useTelemetrySummary, useTenants } from "../api/queries";
import { useSession } from "../api/session";
import { Badge, Flag, NotReported, ago, stateTone } from "../components/common";
import { LoadedTable } from "../components/Loaded";
import { failingChecks } from "../selectors";
import { iops, percent, visibleTenants } from "../telemetry";
import { href } from "../router";

export function HostTable() {
  return (
    <LoadedTable
      query={useHosts()}
      what="hosts"
      empty="No agent has registered yet."
      testId="hosts-table"
      head={["host", "alive", "agent", "kernel", "generation (acked / desired)", "last seen"]}
      row={(h) => (
        <tr key={h.id} data-testid={`host-row-${h.id}`}>
          <td>
            <a href={href({ page: "hosts", id: h.id })}>{h.id}</a>
          </td>
          <td>
            {h.alive === true ? (
              <Badge tone="ok" testId="host-alive">alive</Badge>
            ) : h.alive === false ? (
              <Badge tone="bad" testId="host-alive">down</Badge>
            ) : (
              <Badge tone="idle" testId="host-alive">unknown</Badge>
            )}
          </td>
          <td>{h.agent_version}</td>
          <td>
            {h.capabilities.kernel.release}{" "}
            <Flag on={h.capabilities.kernel.btf} label="BTF" /> <Flag on={h.capabilities.kernel.io_uring} label="io_uring" />{" "}
            <Flag on={h.capabilities.kernel.fuse} label="FUSE" />
          </td>
          <td>
            <span data-testid="host-generation">
              {h.acked_generation} / {h.desired_generation}
            </span>{" "}
            {h.acked_generation < h.desired_generation ? <Badge tone="warn">behind</Badge> : null}
          </td>
          <td>{ago(h.last_seen)}</td>
        </tr>
      )}
    />
  );
}

export function RolloutList({ limit = 10 }: { limit?: number }) {
  return (
    <LoadedTable
      query={useRollouts(limit)}
      what="rollouts"
      empty="No rollouts yet."
      testId="rollouts-table"
      head={["rollout", "state", "cause", "hosts applied", "started"]}
      row={(r) => (
        <tr key={r.id}>
          <td>
            <a href={href({ page: "rules", rollout: r.id })}>
              <code>{r.id.slice(0, 8)}</code>
            </a>
          </td>
          <td>
            <Badge tone={stateTone(r.state)}>{r.state}</Badge>
          </td>
          <td>{r.cause}</td>
          <td>
            {r.targets.filter((t) => t.status === "applied").length} / {r.targets.length}
          </td>
          <td>{ago(r.created_at)}</td>
        </tr>
      )}
    />
  );
}

export function Overview() {
  const hosts = useHosts();
  const tenants = useTenants();
  const rollouts = useRollouts(10);
  const ready = useReadiness();
  const summary = useTelemetrySummary();
  const { access } = useSession();
  const perTenant = new Map(visibleTenants(summary.data, access.tenant).map((t) => [t.name, t]));
  // A tenant token's totals would be everyone's IO: show its own tenant's figures instead.
  const own = access.tenant ? perTenant.get(access.tenant) : null;
  const totalIops = access.tenant ? own?.iops : summary.data?.total_iops;
  const hitRatio = access.tenant ? own?.hit_ratio : summary.data?.hit_ratio;
  const checks = failingChecks(hosts.data ?? [], rollouts.data ?? [], ready.data?.checks);
  const alive = (hosts.data ?? []).filter((h) => h.alive).length;
  return (
    <div>
      <h1>Overview</h1>
      <div className="cards">
        <div className="card">
          <div className="big" data-testid="hosts-alive">
            {alive} / {hosts.data?.length ?? "…"}
          </div>
          hosts alive
        </div>
        <div className="card">
          <div className="big">{tenants.data?.length ?? "…"}</div>
          tenants
        </div>
        <div className="card">
          <div className="big" data-testid="total-iops">{summary.data ? iops(totalIops) : "—"}</div>
          {access.tenant ? "IOPS" : "total IOPS"}
          {summary.data ? "" : " (not reported yet)"}
        </div>
        <div className="card">
          <div className="big" data-testid="total-hit-rate">{summary.data ? percent(hitRatio) : "—"}</div>
          hit rate{summary.data ? "" : " (not reported yet)"}
        </div>
      </div>
      <section>
        <h2>Failing checks</h2>
        {checks.length ? (
          <ul className="checks" data-testid="failing-checks">
            {checks.map((c, i) => (
              <li key={i}>
                <Badge tone="bad">{c.what}</Badge> {c.detail}
              </li>
            ))}
          </ul>
        ) : (
          <p data-testid="no-failing-checks">
            <Badge tone="ok">all clear</Badge> every host alive and current, no failed rollouts
          </p>
        )}
      </section>
      <section>
        <h2>Hosts</h2>
        <HostTable />
      </section>
      <section>
        <h2>Tenants</h2>
        <LoadedTable
          query={tenants}
          what="tenants"
          empty="No tenants yet."
          testId="tenants-table"
          head={["tenant", "IOPS", "hit rate"]}
          row={(t) => (
            <tr key={t.name} data-testid={`tenant-row-${t.name}`}>
              <td>
                <a href={href({ page: "tenants", name: t.name })}>{t.name}</a>
              </td>
              <td>{iops(perTenant.get(t.name)?.iops)}</td>
              <td>{percent(perTenant.get(t.name)?.hit_ratio)}</td>
            </tr>
          )}
        />
        {!summary.data ? <NotReported what="Per-tenant IOPS and hit rate" /> : null}
      </section>
      <section>
        <h2>Latest rollouts</h2>
        <RolloutList />
      </section>
    </div>
  );
}
