import { describe, expect, it } from "vitest";
import { fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { App } from "../App";
import type { components } from "../api/schema.gen";
import { fakeController, wrap } from "../test-controller";
import { kg, years } from "./Sustainability";

type Schemas = components["schemas"];

const ASSUMPTIONS: Schemas["SustainabilityAssumptions"] = {
  rated_dwpd: 3.5, rated_years: 5, pe_cycles: 6391.875, service_years: 5, kgco2e_per_gb: 0.16, window_s: 3600,
};

// The numbers of the API test (controller/tests/test_sustainability_api.py): web's Kangaroo
// writes 16 MB of media for 1 MB given, api 2 MB for 2 MB.
const TENANTS: Schemas["SustainabilityTenants"] = {
  assumptions: ASSUMPTIONS,
  tenants: [
    { name: "api", engines: ["kangaroo"], given_bytes: 2e6, host_bytes: 2e6, media_bytes: 2e6, alwa: 1, dlwa: 1, wa: 1, dwpd: 0.0161,
      lifetime_years: 1.21, kg_per_year: 0.0157, devices: [{ host: "host-a", name: "flash0", share: 1 / 9, kg_per_year: 0.0157 }] },
    { name: "web", engines: ["kangaroo"], given_bytes: 1e6, host_bytes: 8e6, media_bytes: 16e6, alwa: 8, dlwa: 2, wa: 16, dwpd: 0.0644,
      lifetime_years: 1.21, kg_per_year: 0.1264, devices: [{ host: "host-a", name: "flash0", share: 8 / 9, kg_per_year: 0.1264 }] },
    { name: "idle", engines: [], given_bytes: 0, host_bytes: 0, media_bytes: null, alwa: null, dlwa: null, wa: null, dwpd: 0,
      lifetime_years: null, kg_per_year: 0, devices: [] },
  ],
};

const DEVICES: Schemas["SustainabilityDevices"] = {
  assumptions: ASSUMPTIONS,
  devices: [
    { host: "host-a", name: "flash0", capacity_bytes: 1 << 30, placement_handles: 8, measured: true, seconds: 100,
      host_bytes_per_s: 1e5, media_bytes_per_s: 1.8e5, dlwa: 1.8, dwpd: 8.05, lifetime_years: 1.21, embodied_kg: 0.1718,
      kg_per_year: 0.1422, tenants: [{ tenant: "api", share: 1 / 9, kg_per_year: 0.0158 }, { tenant: "web", share: 8 / 9, kg_per_year: 0.1264 }],
      unattributed_share: 0, separate_handles_dlwa: 2.63, one_handle_dlwa: 7.9 },
    { host: "host-b", name: "flash0", capacity_bytes: 1 << 30, placement_handles: 0, measured: false, seconds: null,
      host_bytes_per_s: null, media_bytes_per_s: null, dlwa: null, dwpd: null, lifetime_years: null, embodied_kg: 0.1718,
      kg_per_year: null, tenants: [], unattributed_share: null, separate_handles_dlwa: null, one_handle_dlwa: null },
  ],
};

const scenario = (name: string, engine: string, wa: number, life: number, kgy: number, source = "measured"): Schemas["SustainabilityScenario"] => ({
  name, source, engine, wa, dlwa: 2, lifetime_years: life, kg_per_year: kgy,
});

const COMPARE_WEB: Schemas["SustainabilityComparison"] = {
  assumptions: ASSUMPTIONS,
  tenant: "web",
  scenarios: [
    scenario("current", "kangaroo", 16, 1.21, 0.1264),
    scenario("fairywren", "fairywren", 1.31, 6.3, 0.0129, "modelled: measured write amplification x 1.89/23.0 (FairyWREN §6.4)"),
    scenario("separate handles", "kangaroo", 21, 0.66, 0.23, "modelled: placement closed form (FDP in CacheLib, Theorem 1)"),
    scenario("one handle", "kangaroo", 63, 0.22, 0.69, "modelled: placement closed form (FDP in CacheLib, Theorem 1)"),
  ],
};

const ROUTES = {
  "/api/v1/sustainability/tenants": TENANTS,
  "/api/v1/sustainability/devices": DEVICES,
  "/api/v1/sustainability/compare?tenant=api": { assumptions: ASSUMPTIONS, tenant: "api", scenarios: [scenario("current", "kangaroo", 1, 1.21, 0.0157)] },
  "/api/v1/sustainability/compare?tenant=web": COMPARE_WEB,
};

function signedIn(hash: string) {
  sessionStorage.setItem("lachesis.token", "good");
  window.location.hash = hash;
}

describe("sustainability page", () => {
  it("shows each tenant's and device's write amplification, lifetime and carbon, and compares a tenant's alternatives", async () => {
    signedIn("#/sustainability");
    render(wrap(<App />, fakeController({ routes: ROUTES })));
    const web = await screen.findByTestId("sus-tenant-web");
    expect(within(web).getByTestId("tenant-alwa").textContent).toBe("8.00");
    expect(within(web).getByTestId("tenant-dlwa").textContent).toBe("2.00");
    expect(within(web).getByTestId("tenant-lifetime").textContent).toBe("1.2 y");
    expect(within(web).getByTestId("tenant-kg").textContent).toBe("0.13 kg");
    // A tenant that wrote nothing: no ratios, no devices.
    const idle = screen.getByTestId("sus-tenant-idle");
    expect(within(idle).getByTestId("tenant-alwa").textContent).toBe("—");
    expect(within(idle).getByTestId("tenant-lifetime").textContent).toBe("—");
    expect(screen.getByTestId("assumptions").textContent).toMatch(/3.5 DWPD for 5 years \(6,392 P\/E cycles\), 0.16 kgCO2e per GB/);

    const dev = await screen.findByTestId("sus-device-host-a-flash0");
    expect(within(dev).getByTestId("device-dlwa").textContent).toBe("1.80");
    expect(within(dev).getByTestId("device-lifetime").textContent).toBe("1.2 y");
    expect(within(dev).getByTestId("device-shares").textContent).toBe("api 11%, web 89%");
    expect(within(screen.getByTestId("sus-device-host-b-flash0")).getByTestId("device-lifetime").textContent).toBe("not measured");

    // The first tenant is compared until another is chosen.
    await waitFor(() => expect(screen.getByTestId("compare-title").textContent).toMatch(/^api:/));
    fireEvent.click(screen.getByTestId("compare-web"));
    const fw = await screen.findByTestId("scenario-fairywren");
    expect(within(fw).getByTestId("scenario-lifetime").textContent).toBe("6.3 y");
    expect(within(screen.getByTestId("scenario-current")).getByTestId("scenario-lifetime").textContent).toBe("1.2 y");
    expect(within(screen.getByTestId("scenario-one-handle")).getByTestId("scenario-kg").textContent).toBe("0.69 kg");
    expect(screen.getByTestId("nav-sustainability").className).toBe("current");
  });

  it("shows a tenant's token its tenant and no devices", async () => {
    signedIn("#/sustainability");
    const routes = {
      ...ROUTES,
      "/api/v1/whoami": { actor: "token:w", role: "viewer", tenant: "web", write_refusal: "read-only" },
      "/api/v1/sustainability/tenants": { ...TENANTS, tenants: [TENANTS.tenants[1]] },
    };
    render(wrap(<App />, fakeController({ routes })));
    await screen.findByTestId("sus-tenant-web");
    await waitFor(() => expect(screen.getByTestId("who").textContent).toMatch(/of web/));
    expect(screen.queryByTestId("sustainability-devices")).toBeNull();
    expect(await screen.findByTestId("scenario-fairywren")).toBeTruthy();
  });

  it("says so when the controller has no sustainability routes", async () => {
    signedIn("#/sustainability");
    render(wrap(<App />, fakeController({ routes: {} })));
    expect((await screen.findAllByText(/not reported/i)).length).toBeGreaterThan(0);
  });

  it("formats lifetimes and carbon", () => {
    expect([years(null), years(0.5), years(12.4), kg(null), kg(0.1234), kg(1081.1)]).toEqual(["not worn", "0.5 y", "12 y", "—", "0.12 kg", "1081 kg"]);
  });
});
