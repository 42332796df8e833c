// The fake controller's stage and device answers (test-controller.tsx) against
// api-schemas/openapi.json. Their types are generated from it (types.ts aliases schema.gen.ts),
// so `tsc` refuses a field the schema lacks or a null it does not allow; this test then requires
// the fixtures of each schema to have exactly the schema's properties, every required one, and a
// null somewhere in each nullable property (and nowhere else), so the page tests see every shape
// the controller can answer.
import { describe, expect, it } from "vitest";
import openapi from "../../../api-schemas/openapi.json";
import { DEVICES, STAGES } from "../test-controller";
import type { Device, DeviceOut, DevicePoint, HandleOut, StageChange, StageHost, StageOut, StagePatch, StagePoint } from "./types";

type Schema = { properties: Record<string, { anyOf?: { type?: string; enum?: unknown[] }[]; type?: string; enum?: unknown[] }>; required?: string[] };
const schemas = (openapi as unknown as { components: { schemas: Record<string, Schema> } }).components.schemas;

const SHARED_STAGE: StageOut = { name: "cache/shared", kind: "cache", owner: null, source: "api", declared: {}, hosts: [] };
const CHANGE: StageChange = { ...STAGES[0], rollout_id: "r1" };
const NULL_POINT: StagePoint = { at: "2026-11-21T10:00:00Z", size_bytes: null, installed_bytes: null, hit_ratio: null };
const UNREPORTED_DEVICE: DeviceOut = {
  host: "host-b",
  name: "nvme0",
  kind: "block",
  path: "/dev/nvme0n1",
  size_bytes: 1 << 30,
  placement_handles: 0,
  reclaim_unit_bytes: null,
  host_bytes_written: null,
  media_bytes_written: null,
  dlwa: null,
  predicted_dlwa: null,
  predicted_by: null,
  handles: [],
  series: [],
};
const NULL_HANDLE: HandleOut = { handle: 2, host_bytes_written: 0, media_bytes_written: null, dlwa: null };
const DEVICE: Device = { name: "flash0", path: "/f.img", kind: "measured", size_bytes: 1 << 26, fdp: false, placement_handles: 4, reclaim_unit_bytes: 1 << 22 };
const POINTS: DevicePoint[] = DEVICES[0].series;
const PATCH: Required<StagePatch> = {
  size_bytes: 1 << 20,
  write_mode: "back",
  eviction: "lru",
  engine: "loc",
  max_dirty_bytes: null,
  max_bandwidth_bytes_per_s: null,
  max_iops: null,
};

// a host that reports a stage desired state no longer ships it: nothing allocated
const HOSTS: StageHost[] = [...STAGES.flatMap((s) => s.hosts), { ...STAGES[1].hosts[0], host_id: "host-c", allocated_bytes: null }];
const CASES: [string, object[]][] = [
  ["StageOut", [...STAGES, SHARED_STAGE]],
  ["StageChange", [CHANGE, { ...SHARED_STAGE, rollout_id: "r2" }]],
  ["StageHost", HOSTS],
  ["StagePointOut", [...HOSTS.flatMap((h) => h.series), NULL_POINT]],
  ["StagePatch", [PATCH]],
  ["DeviceOut", [...DEVICES, UNREPORTED_DEVICE]],
  ["HandleOut", [...DEVICES[0].handles, NULL_HANDLE]],
  ["DevicePoint", POINTS],
  ["Device", [DEVICE]],
];

const nullable = (p: Schema["properties"][string]) => (p.anyOf ?? []).some((t) => t.type === "null");

describe("fixtures against openapi.json", () => {
  it.each(CASES)("%s has the schema's fields", (name, fixtures) => {
    const schema = schemas[name];
    expect(schema, `openapi.json has no schema ${name}`).toBeTruthy();
    const props = Object.keys(schema.properties).sort();
    for (const f of fixtures) {
      expect(Object.keys(f).sort()).toEqual(props);
      for (const r of schema.required ?? []) expect(f).toHaveProperty(r);
    }
    for (const [field, p] of Object.entries(schema.properties)) {
      const values = fixtures.map((f) => (f as Record<string, unknown>)[field]);
      if (name === "StagePatch") continue; // every field optional and nullable: a request, not an answer
      expect(values.some((v) => v === null), `${name}.${field}: nullable is ${nullable(p)}`).toBe(nullable(p));
    }
  });

  it("has the enums of the schema", () => {
    const kinds: Record<Device["kind"], true> = { file: true, block: true, nvme: true, measured: true };
    expect(Object.keys(kinds).sort()).toEqual([...(schemas.Device.properties.kind.enum as string[])].sort());
    const enumOf = (schema: string, field: string) =>
      (schemas[schema].properties[field].anyOf ?? []).flatMap((t) => (t.enum as string[] | undefined) ?? []).sort();
    const modes: Record<NonNullable<StagePatch["write_mode"]>, true> = { through: true, back: true, around: true };
    const engines: Record<NonNullable<StagePatch["engine"]>, true> = {
      dram: true, loc: true, kangaroo: true, hybrid: true, fairywren: true, "hybrid-fairywren": true,
    };
    const evictions: Record<NonNullable<StagePatch["eviction"]>, true> = { lru: true, fifo: true, mrc: true };
    expect(Object.keys(modes).sort()).toEqual(enumOf("StagePatch", "write_mode"));
    expect(Object.keys(engines).sort()).toEqual(enumOf("StagePatch", "engine"));
    expect(Object.keys(evictions).sort()).toEqual(enumOf("StagePatch", "eviction"));
  });
});
