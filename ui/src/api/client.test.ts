import { describe, expect, it, vi } from "vitest";
import { ApiClient, ApiError, detectFeatures, orNoData, parseProblem } from "./client";

/** The ApiError a call fails with (and a test failure if it succeeds). */
function failure(p: Promise<unknown>): Promise<ApiError> {
  return p.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (e: ApiError) => e,
  );
}

function fakeFetch(status: number, body: unknown, contentType = "application/json") {
  return vi.fn(async (_url: RequestInfo | URL, _init?: RequestInit) =>
    new Response(typeof body === "string" ? body : JSON.stringify(body), { status, headers: { "Content-Type": contentType } }),
  );
}

describe("ApiClient", () => {
  it("sends the token as a bearer header and JSON bodies with their content type", async () => {
    const f = fakeFetch(201, { name: "r", rollout_id: "x" });
    const c = new ApiClient("s3cret", f);
    await c.post("/api/v1/rules", { name: "r" });
    const [url, init] = f.mock.calls[0];
    expect(url).toBe("/api/v1/rules");
    const headers = init?.headers as Record<string, string>;
    expect(headers.Authorization).toBe("Bearer s3cret");
    expect(headers["Content-Type"]).toBe("application/json");
    expect(init?.body).toBe('{"name":"r"}');
  });

  it("posts a YAML document as text with its content type", async () => {
    const f = fakeFetch(200, { name: "p" });
    await new ApiClient("t", f).postText("/api/v1/policies?dry_run=true", "kind: Policy\n");
    const [url, init] = f.mock.calls[0];
    expect(url).toBe("/api/v1/policies?dry_run=true");
    expect(init?.method).toBe("POST");
    expect(init?.body).toBe("kind: Policy\n");
    expect((init?.headers as Record<string, string>)["Content-Type"]).toBe("application/yaml");
  });

  it("sends no Authorization header without a token", async () => {
    const f = fakeFetch(200, []);
    await new ApiClient(null, f).get("/api/v1/hosts");
    expect((f.mock.calls[0][1]?.headers as Record<string, string>).Authorization).toBeUndefined();
  });

  it("turns a problem+json answer into an ApiError with its field errors", async () => {
    const problem = {
      type: "https://lachesis.dev/problems/validation-error",
      title: "Invalid request",
      status: 422,
      detail: "match.ops[0]: Input should be 'read'",
      errors: [{ field: "match.ops[0]", message: "Input should be 'read'" }],
    };
    const c = new ApiClient("t", fakeFetch(422, problem, "application/problem+json"));
    const err = await failure(c.post("/api/v1/rules", {}));
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(422);
    expect(err.message).toBe(problem.detail);
    expect(err.problem.errors).toEqual(problem.errors);
  });

  it("flags 401 and 403", async () => {
    const e401 = await failure(new ApiClient("t", fakeFetch(401, { title: "Unauthorized", status: 401, detail: "wrong token" })).get("/x"));
    expect(e401.unauthorized).toBe(true);
    const e403 = await failure(new ApiClient("t", fakeFetch(403, { title: "Forbidden", status: 403, detail: "viewer" })).get("/x"));
    expect(e403.forbidden).toBe(true);
    expect(e403.unauthorized).toBe(false);
  });

  it("reports an unreachable controller as status 0", async () => {
    const f = vi.fn(async () => {
      throw new TypeError("Failed to fetch");
    });
    const err = await failure(new ApiClient("t", f).get("/api/v1/hosts"));
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(0);
    expect(err.message).toContain("Failed to fetch");
  });
});

describe("parseProblem", () => {
  it("keeps a text body as the detail", async () => {
    const p = await parseProblem(new Response("upstream exploded", { status: 502, statusText: "Bad Gateway" }));
    expect(p).toMatchObject({ status: 502, title: "Bad Gateway", detail: "upstream exploded" });
  });

  it("copes with an empty body", async () => {
    const p = await parseProblem(new Response(null, { status: 500, statusText: "Internal Server Error" }));
    expect(p).toMatchObject({ status: 500, detail: "Internal Server Error", type: "about:blank" });
  });

  it("fills what a plain JSON error leaves out", async () => {
    const p = await parseProblem(new Response(JSON.stringify({ detail: "nope" }), { status: 409 }));
    expect(p).toMatchObject({ status: 409, detail: "nope", errors: null });
  });
});

describe("detectFeatures", () => {
  it("finds the endpoints a newer controller has", () => {
    const f = detectFeatures({ paths: { "/api/v1/hosts": {}, "/api/v1/policies": {}, "/api/v1/audit": {}, "/api/v1/whoami": {} } });
    expect(f).toEqual({ policies: true, audit: true, whoami: "/api/v1/whoami", stages: false, devices: false });
    const loop = detectFeatures({ paths: { "/api/v1/stages": {}, "/api/v1/stages/{name}": {}, "/api/v1/devices": {} } });
    expect(loop).toMatchObject({ stages: true, devices: true });
  });

  it("finds nothing in an older or missing document", () => {
    const none = { policies: false, audit: false, whoami: null, stages: false, devices: false };
    expect(detectFeatures({ paths: { "/api/v1/hosts": {} } })).toEqual(none);
    expect(detectFeatures(null)).toEqual(none);
  });
});

describe("orNoData", () => {
  it("reads a 404 (endpoint or data not there yet) as null and passes data through", async () => {
    expect(await orNoData(new ApiClient("t", fakeFetch(404, { title: "Not Found", status: 404, detail: "Not Found" })).get("/api/v1/placements"))).toBeNull();
    expect(await orNoData(new ApiClient("t", fakeFetch(200, [{ host_id: "h" }])).get("/api/v1/placements"))).toEqual([{ host_id: "h" }]);
  });

  it("keeps every other refusal an error", async () => {
    const e = await failure(orNoData(new ApiClient("t", fakeFetch(403, { title: "Forbidden", status: 403, detail: "not yours" })).get("/x")));
    expect(e.status).toBe(403);
    expect((await failure(orNoData(new ApiClient("t", fakeFetch(500, "oops", "text/plain")).get("/x")))).status).toBe(500);
  });
});
