import { describe, expect, it } from "vitest";
import { render, screen, within } from "@testing-library/react";
import { TwoLevelTable, type TwoLevelTenant } from "./TwoLevel";

const MiB = 1 << 20;
const MEDIA: TwoLevelTenant = {
  tenant: "media", alpha: 0.2, host_bytes: 32 * MiB, server_bytes: 128 * MiB, predicted_hit_ratio: 0.7, predicted_bandwidth: 5e8,
  levels: [
    { level: "host", stage: "cache/media-l1", shipped_bytes: 32 * MiB, installed_bytes: 32 * MiB, hits: 30, misses: 70, hit_ratio: 0.3, exclusive: false, hosts: ["host-a"] },
    { level: "server", stage: "cache/media-l2", shipped_bytes: 128 * MiB, installed_bytes: null, hits: null, misses: null, hit_ratio: null, exclusive: false, hosts: [] },
  ],
};

describe("TwoLevel", () => {
  it("shows the split and each level's size and hits", () => {
    render(<TwoLevelTable tenants={[MEDIA]} />);
    const host = within(screen.getByTestId("two-level-media-host"));
    expect(host.getByTestId("alpha").textContent).toBe("0.20");
    expect(host.getByTestId("shipped").textContent).toBe("32 MiB");
    expect(host.getByTestId("hit-ratio").textContent).toBe("0.30");
    const server = within(screen.getByTestId("two-level-media-server"));
    expect(server.getByTestId("shipped").textContent).toBe("128 MiB");
    expect(server.getByTestId("hits").textContent).toBe("—");
    expect(server.getByTestId("demoted").textContent).toBe("inclusive");
  });

  it("shows what level 1 demoted to an exclusive server level and the hits on it", () => {
    const [host, server] = MEDIA.levels;
    const demoting: TwoLevelTenant = {
      ...MEDIA,
      levels: [{ ...host, demoted_blocks: 52 }, { ...server, exclusive: true, demoted_blocks: 50, demotion_hits: 35 }],
    };
    render(<TwoLevelTable tenants={[demoting]} />);
    expect(within(screen.getByTestId("two-level-media-host")).getByTestId("demoted").textContent).toBe("52");
    expect(within(screen.getByTestId("two-level-media-server")).getByTestId("demoted").textContent).toBe("50 (35 hits)");
  });

  it("says when no tenant has two levels", () => {
    render(<TwoLevelTable tenants={[]} />);
    expect(screen.getByText("No tenant has a two-level cache.")).toBeTruthy();
  });
});
