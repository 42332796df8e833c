// @vitest-environment node
// Drift check: schema.gen.ts is what the generator makes of api-schemas/openapi.json today (as
// controller/tests/test_openapi.py checks openapi.json against the controller). On a failure,
// run `npm run gen:api` and commit the result.
import { describe, expect, it } from "vitest";
import { committed, generate } from "../../scripts/api-types.mjs";

describe("schema.gen.ts", () => {
  it("is generated from the current openapi.json", async () => {
    expect((await committed()) === (await generate()), "src/api/schema.gen.ts is stale: run `npm run gen:api`").toBe(true);
  });
});
