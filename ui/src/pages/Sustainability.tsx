// Flash wear and embodied carbon from measured bytes: per device and per tenant ALWA, DLWA,
// DWPD, projected lifetime and kgCO2e per year, and a tenant's alternatives (the other
// small-object engine, separate handles vs one). The model and its sources: docs/sustainability.md.
import { useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { orNoData } from "../api/client";
import { POLL_MS } from "../api/queries";
import { useSession } from "../api/session";
import type { components } from "../api/schema.gen";
import { Loaded, LoadedTable } from "../components/Loaded";
import { ratio } from "../components/common";

type Schemas = components["schemas"];
type Devices = Schemas["SustainabilityDevices"];
type Tenants = Schemas["SustainabilityTenants"];
type Comparison = Schemas["SustainabilityComparison"];
type Assumptions = Schemas["SustainabilityAssumptions"];

/** A polled read of an endpoint an older controller may lack (404: null, "not reported"). */
function usePolledPath<T>(path: string, enabled = true) {
  const { client, token, noteError } = useSession();
  return useQuery<T | null>({
    queryKey: ["sustainability", path, token],
    queryFn: () => orNoData(client.get<T>(path)).catch((e) => Promise.reject(noteError(e, false))),
    refetchInterval: POLL_MS,
    enabled,
  });
}

export const years = (y: number | null | undefined) =>
  typeof y === "number" && Number.isFinite(y) ? `${y >= 10 ? y.toFixed(0) : y.toFixed(1)} y` : "not worn";
export const kg = (x: number | null | undefined) => (typeof x === "number" && Number.isFinite(x) ? `${x.toFixed(x >= 10 ? 0 : 2)} kg` : "—");
const dwpd = (x: number | null | undefined) => (typeof x === "number" && Number.isFinite(x) ? x.toFixed(3) : "—");
const percent = (x: number) => `${(x * 100).toFixed(0)}%`;

function AssumptionsLine({ a }: { a: Assumptions }) {
  return (
    <p className="muted" data-testid="assumptions">
      Flash rated {a.rated_dwpd} DWPD for {a.rated_years} years ({Math.round(a.pe_cycles).toLocaleString("en")} P/E cycles),{" "}
      {a.kgco2e_per_gb} kgCO2e per GB, replaced after {a.service_years} years at the latest; rates over the last{" "}
      {Math.round(a.window_s)} s.
    </p>
  );
}

function Compare({ tenant }: { tenant: string }) {
  const cmp = usePolledPath<Comparison>(`/api/v1/sustainability/compare?tenant=${encodeURIComponent(tenant)}`);
  return (
    <LoadedTable
      query={{ data: cmp.data?.scenarios, error: cmp.error }}
      what={`the comparison for ${tenant}`}
      empty="Nothing to compare."
      testId="compare-table"
      head={["scenario", "engine", "WA", "DLWA", "lifetime", "kgCO2e / year", "source"]}
      row={(s) => (
        <tr key={s.name} data-testid={`scenario-${s.name.replace(/ /g, "-")}`}>
          <td>{s.name}</td>
          <td>{s.engine ?? "—"}</td>
          <td data-testid="scenario-wa">{ratio(s.wa)}</td>
          <td>{ratio(s.dlwa)}</td>
          <td data-testid="scenario-lifetime">{years(s.lifetime_years)}</td>
          <td data-testid="scenario-kg">{kg(s.kg_per_year)}</td>
          <td className="muted">{s.source}</td>
        </tr>
      )}
    />
  );
}

export function Sustainability() {
  const { access } = useSession();
  const tenants = usePolledPath<Tenants>("/api/v1/sustainability/tenants");
  // Devices are shared by all tenants: a tenant's token is refused them.
  const devices = usePolledPath<Devices>("/api/v1/sustainability/devices", !access.tenant);
  const [chosen, setChosen] = useState<string | null>(null);
  const names = tenants.data?.tenants.map((t) => t.name) ?? [];
  const compared = chosen ?? names[0] ?? null;
  return (
    <div>
      <h1>Sustainability</h1>
      <p className="muted">
        What the caches' writes cost the flash: write amplification in the cache (ALWA) and in the device (DLWA), device
        writes per day, the lifetime the media's endurance gives at the measured write rate, and the device's embodied
        carbon per year, shared among tenants by their media bytes.
      </p>
      {tenants.data ? <AssumptionsLine a={tenants.data.assumptions} /> : null}
      <h2>Tenants</h2>
      <Loaded query={tenants} what="tenants" missing={{ what: "Sustainability (this controller has no /api/v1/sustainability)" }}>
        {(body) => (
          <LoadedTable
            query={{ data: body.tenants, error: null }}
            what="tenants"
            empty="No tenants."
            testId="sustainability-tenants"
            head={["tenant", "engines", "ALWA", "DLWA", "WA", "DWPD", "lifetime", "kgCO2e / year"]}
            row={(t) => (
              <tr key={t.name} data-testid={`sus-tenant-${t.name}`}>
                <td>
                  <button type="button" className="btn plain" onClick={() => setChosen(t.name)} data-testid={`compare-${t.name}`}>
                    {t.name}
                  </button>
                </td>
                <td>{t.engines.join(", ") || "—"}</td>
                <td data-testid="tenant-alwa">{ratio(t.alwa)}</td>
                <td data-testid="tenant-dlwa">{ratio(t.dlwa)}</td>
                <td>{ratio(t.wa)}</td>
                <td>{dwpd(t.dwpd)}</td>
                <td data-testid="tenant-lifetime">{t.devices.length ? years(t.lifetime_years) : "—"}</td>
                <td data-testid="tenant-kg">{kg(t.kg_per_year)}</td>
              </tr>
            )}
          />
        )}
      </Loaded>
      {compared ? (
        <>
          <h2 data-testid="compare-title">{compared}: engines and placement compared</h2>
          <Compare tenant={compared} />
        </>
      ) : null}
      {access.tenant ? null : (
        <>
          <h2>Devices</h2>
          <Loaded query={devices} what="devices" missing={{ what: "Sustainability of devices" }}>
            {(body) => (
              <LoadedTable
                query={{ data: body.devices, error: null }}
                what="devices"
                empty="No agent has registered a device."
                testId="sustainability-devices"
                head={["host", "device", "DLWA", "DWPD", "lifetime", "embodied", "kgCO2e / year", "tenants", "DLWA separate / one handle"]}
                row={(d) => (
                  <tr key={`${d.host}/${d.name}`} data-testid={`sus-device-${d.host}-${d.name}`}>
                    <td>{d.host}</td>
                    <td>{d.name}</td>
                    <td data-testid="device-dlwa">{ratio(d.dlwa)}</td>
                    <td>{dwpd(d.dwpd)}</td>
                    <td data-testid="device-lifetime">{d.measured ? years(d.lifetime_years) : "not measured"}</td>
                    <td>{kg(d.embodied_kg)}</td>
                    <td data-testid="device-kg">{kg(d.kg_per_year)}</td>
                    <td data-testid="device-shares">
                      {d.tenants.map((t) => `${t.tenant} ${percent(t.share)}`).join(", ") || "—"}
                    </td>
                    <td>
                      {ratio(d.separate_handles_dlwa)} / {ratio(d.one_handle_dlwa)}
                    </td>
                  </tr>
                )}
              />
            )}
          </Loaded>
        </>
      )}
    </div>
  );
}
