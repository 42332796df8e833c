import { useQuery } from "@tanstack/react-query";
import { POLL_MS, useRules, useTenant, useTenants } from "../api/queries";
import { useSession } from "../api/session";
import { ErrorBox, Loading, NotReported, bytes } from "../components/common";
import { CurveChart } from "../components/CurveChart";
import { rulesForTenant, tenantStages } from "../model";
import { href } from "../router";
import { RuleTable } from "./Hosts";

export function Tenants({ name }: { name?: string }) {
  const tenants = useTenants();
  return (
    <div className="split">
      <nav className="sidelist">
        <h2>Tenants</h2>
        {tenants.error ? <ErrorBox error={tenants.error} /> : null}
        {!tenants.data ? <Loading what="tenants" /> : null}
        <ul>
          {(tenants.data ?? []).map((t) => (
            <li key={t.name} className={t.name === name ? "current" : ""}>
              <a href={href({ page: "tenants", name: t.name })}>{t.name}</a>
            </li>
          ))}
        </ul>
        {tenants.data && !tenants.data.length ? <p className="muted">No tenants yet.</p> : null}
      </nav>
      <div className="main">{name ? <TenantDetail name={name} /> : <p className="muted">Pick a tenant.</p>}</div>
    </div>
  );
}

/** The caches policies give this tenant (where the controller has policies). */
function TenantCache({ name }: { name: string }) {
  const { client, token, features } = useSession();
  const policies = useQuery<{ name: string; compiled?: { stages?: unknown[] } }[]>({
    queryKey: ["policies", token],
    queryFn: () => client.get("/api/v1/policies"),
    refetchInterval: POLL_MS,
    enabled: features.policies,
  });
  const stages = tenantStages(policies.data ?? [], name);
  if (!features.policies || !stages.length) return <NotReported what="Cache partition and allocated size" />;
  return (
    <table data-testid="tenant-stages">
      <thead>
        <tr>
          <th>stage</th>
          <th>kind</th>
          <th>size</th>
          <th>owner / shared with</th>
          <th>policy</th>
        </tr>
      </thead>
      <tbody>
        {stages.map((s) => (
          <tr key={s.name}>
            <td>{s.name}</td>
            <td>{s.kind}</td>
            <td>{typeof s.size_bytes === "number" ? bytes(s.size_bytes) : "—"}</td>
            <td>{s.owner ?? (s.shared_with ?? []).join(", ")}</td>
            <td>{s.policy}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function TenantDetail({ name }: { name: string }) {
  const tenant = useTenant(name);
  const rules = useRules();
  if (tenant.error) return <ErrorBox error={tenant.error} />;
  if (!tenant.data) return <Loading what={`tenant ${name}`} />;
  const t = tenant.data;
  return (
    <div data-testid="tenant-detail">
      <h1>{t.name}</h1>
      {t.description ? <p>{t.description}</p> : null}
      <section>
        <h2>Miss-ratio curve</h2>
        {/* The API reports no curves yet: the chart says so instead of drawing made-up data. */}
        <CurveChart curve={null} />
      </section>
      <section>
        <h2>Hit rate and IOPS</h2>
        <NotReported what="Hit rate and IOPS over time" />
      </section>
      <section>
        <h2>Cache</h2>
        <TenantCache name={t.name} />
      </section>
      <section>
        <h2>Classifiers</h2>
        <table>
          <thead>
            <tr>
              <th>kind</th>
              <th>value</th>
            </tr>
          </thead>
          <tbody>
            {t.classifiers.map((c, i) => (
              <tr key={i}>
                <td>{c.kind}</td>
                <td>
                  <code>{c.value}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
      <section>
        <h2>Rules</h2>
        <RuleTable rules={rulesForTenant(rules.data ?? [], t.name)} />
      </section>
    </div>
  );
}
