// Two-level caches (Moirai §5.3.5): per tenant the split the allocation loop put in force
// (α, a1 on the hosts, a2 at the storage server) and, per level, the size shipped and
// installed and the hits and misses the agents report; with an exclusive server level, the
// blocks level 1 demoted (evicted clean and handed down) and the server level's hits on them.
import { useQuery } from "@tanstack/react-query";
import { POLL_MS } from "../../api/queries";
import { useSession } from "../../api/session";
import type { components } from "../../api/schema.gen";
import { ratio, size } from "../../components/common";
import { Table } from "../../components/Table";

export type TwoLevelTenant = components["schemas"]["TwoLevelTenantOut"];
type Level = components["schemas"]["LevelOut"];

export function useTwoLevel() {
  const { client, token, noteError } = useSession();
  return useQuery<components["schemas"]["TwoLevelOut"]>({
    queryKey: ["apps", "two-level", token],
    queryFn: () => client.get<components["schemas"]["TwoLevelOut"]>("/api/v1/apps/two-level").catch((e) => Promise.reject(noteError(e, false))),
    refetchInterval: POLL_MS,
  });
}

/** Blocks demoted (and, at an exclusive server level, its hits on them); "inclusive" for a
 * server level that takes no demotions. */
function demotion(l: Level): string {
  if (l.level === "server" && !l.exclusive) return "inclusive";
  if (l.demoted_blocks == null) return "—";
  return l.level === "server" ? `${l.demoted_blocks} (${l.demotion_hits ?? 0} hits)` : `${l.demoted_blocks}`;
}

/** One row per level of each tenant: the tenant's split on its first row. */
export function TwoLevelTable({ tenants }: { tenants: TwoLevelTenant[] }) {
  if (!tenants.length) return <p className="muted">No tenant has a two-level cache.</p>;
  const rows = tenants.flatMap((t) => t.levels.map((l, i) => ({ t, l, first: i === 0 })));
  return (
    <Table
      testId="two-level"
      head={["tenant", "α", "split (a1 / a2)", "level", "stage", "shipped", "installed", "hits", "misses", "hit ratio", "demoted (hits)"]}
      rows={rows}
      row={({ t, l, first }: { t: TwoLevelTenant; l: Level; first: boolean }) => (
        <tr key={`${t.tenant}/${l.level}`} data-testid={`two-level-${t.tenant}-${l.level}`}>
          <td>{first ? t.tenant : ""}</td>
          <td data-testid="alpha">{first ? ratio(t.alpha) : ""}</td>
          <td>{first ? (t.alpha === null ? "no split in force" : `${size(t.host_bytes)} / ${size(t.server_bytes)}`) : ""}</td>
          <td>{l.level}</td>
          <td>{l.stage} <small className="muted">{l.hosts.join(", ")}</small></td>
          <td data-testid="shipped">{size(l.shipped_bytes)}</td>
          <td>{size(l.installed_bytes)}</td>
          <td data-testid="hits">{l.hits ?? "—"}</td>
          <td>{l.misses ?? "—"}</td>
          <td data-testid="hit-ratio">{ratio(l.hit_ratio)}</td>
          <td data-testid="demoted">{demotion(l)}</td>
        </tr>
      )}
    />
  );
}

export function TwoLevel() {
  const q = useTwoLevel();
  return (
    <section data-testid="app-two-level">
      <h2>Two-level caches</h2>
      {q.data ? <TwoLevelTable tenants={q.data.tenants} /> : <p className="muted">Loading…</p>}
    </section>
  );
}
