#!/usr/bin/env node
// The dashboard in a real browser (Debian's chromium driven by playwright-core) against a real
// redis-server, controller and two agents: log in; have bad YAML, a schema error and a
// verifier failure marked at their line with nothing changed (tenant & rule editor and policy
// editor); apply through the editor (a policy after its dry run) and see the rollout reach
// every agent; see a tenant's miss-ratio curve, made by an agent from real IO in the tenant's
// cgroup, with the allocated size marked; see each cache stage's allocated size on every host,
// followed live through a resize by the REST API, and every device's DLWA measured beside the
// placement's prediction; be refused as a viewer, with the reason on the buttons; and see, with
// a tenant token, only that tenant.
//
//   node e2e/ui/dashboard.test.mjs        (after `cd ui && npm install && npm run build`)
//
// The UI is taken from the controller at /ui/ when it serves it; otherwise ui/dist is served
// by `vite preview`, which proxies /api to the controller. Screenshots go to
// $LACHESIS_UI_ARTIFACTS (default: a fresh temporary directory, printed at the end).
// Under CI=true a missing prerequisite (chromium, redis-server, the agent, the controller,
// ui/dist) fails the run; otherwise it skips.

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const UI = path.join(ROOT, "ui");
const require = createRequire(path.join(UI, "package.json"));
const CHROMIUM = process.env.LACHESIS_CHROMIUM ?? "/usr/bin/chromium";
const AGENT_BIN = process.env.LACHESIS_AGENT_BIN ?? path.join(ROOT, "agents/target/release/lachesis-agent");
const CONTROLLER_BIN = process.env.LACHESIS_CONTROLLER_BIN ?? path.join(ROOT, ".lachesis/venv/bin/lachesis-controller");
const TOKEN = "ui-e2e-token";
const HOST = "host-a";
const HOSTS = [HOST, "host-b"];
const CI = process.env.CI === "true";

let tmp;
let artifacts;
const procs = [];

function log(...a) {
  console.log(`[ui-e2e ${new Date().toISOString().slice(11, 23)}]`, ...a);
}

function which(bin) {
  return (process.env.PATH ?? "").split(":").some((d) => d && fs.existsSync(path.join(d, bin)));
}

function prerequisites() {
  const missing = [];
  if (!fs.existsSync(CHROMIUM)) missing.push(`${CHROMIUM} (apt-get install -y chromium)`);
  if (!which("redis-server") || !which("redis-cli")) missing.push("redis-server and redis-cli (apt-get install -y redis-server)");
  if (!fs.existsSync(AGENT_BIN)) missing.push(`${AGENT_BIN} (cd agents && cargo build --release)`);
  if (!fs.existsSync(CONTROLLER_BIN)) missing.push(`${CONTROLLER_BIN} (./lachesis install)`);
  if (!fs.existsSync(path.join(UI, "dist/index.html"))) missing.push("ui/dist (cd ui && npm ci && npm run build)");
  try {
    require.resolve("playwright-core");
  } catch {
    missing.push("playwright-core (cd ui && npm ci)");
  }
  return missing;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

function start(name, argv, env = {}) {
  const out = fs.openSync(path.join(tmp, `${name}.log`), "a");
  const p = spawn(argv[0], argv.slice(1), { env: { ...process.env, ...env }, stdio: ["ignore", out, out], detached: true });
  procs.push({ name, p });
  return p;
}

async function stopAll() {
  for (const { p } of procs.reverse()) {
    if (p.exitCode !== null || p.signalCode !== null) continue;
    try {
      process.kill(-p.pid, "SIGTERM");
    } catch {
      /* gone */
    }
    const done = new Promise((r) => p.once("exit", r));
    const t = setTimeout(() => {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {
        /* gone */
      }
    }, 5000);
    await done;
    clearTimeout(t);
  }
}

function logs() {
  return procs
    .map(({ name }) => {
      const f = path.join(tmp, `${name}.log`);
      const text = fs.existsSync(f) ? fs.readFileSync(f, "utf8") : "";
      return `===== ${name} =====\n${text.slice(-4000)}`;
    })
    .join("\n");
}

// The timeout only turns a hang into a failure: keep it generous (no step asserts a duration).
async function waitFor(what, predicate, timeoutMs = 30000, intervalMs = 100) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await predicate();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${last})` : ""}`);
}

function assert(cond, message) {
  if (!cond) throw new Error(`assertion failed: ${message}`);
}

let apiUrl;
async function api(method, p, body, token = TOKEN) {
  const r = await fetch(apiUrl + p, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

// ------------------------------------------------------------------- the tenant's real IO

/** The cgroup v2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host), or null. */
function cgroup2Mount() {
  const mounts = fs.readFileSync("/proc/mounts", "utf8").split("\n").map((l) => l.split(" "));
  return mounts.find((m) => m[2] === "cgroup2")?.[1] ?? null;
}

/** A cgroup of its own for the tenant whose curve the agent measures (needs root and cgroup v2). */
function makeTenantCgroup() {
  const mount = cgroup2Mount();
  if (!mount || process.getuid?.() !== 0) return null;
  const dir = path.join(mount, `lachesis-ui-e2e-${process.pid}`);
  try {
    fs.mkdirSync(dir, { recursive: true });
    return dir;
  } catch (e) {
    log(`cannot create a cgroup at ${dir}: ${e}`);
    return null;
  }
}

/**
 * Block IO in the tenant's cgroup whose LRU curve is known: a 32 MiB file read three times
 * with O_DIRECT (so every read reaches the block layer), so the miss ratio is 1 below 32 MiB
 * and about 1/3 above it.
 */
function tenantIo(cgroup, file) {
  const dd = (args) => spawnSync("dd", [...args, "status=none"], { stdio: "inherit" });
  if (!fs.existsSync(file)) dd(["if=/dev/zero", `of=${file}`, "bs=1M", "count=32", "oflag=direct"]);
  const r = spawnSync("sh", ["-c", `echo $$ > ${cgroup}/cgroup.procs && for i in 1 2 3; do dd if=${file} of=/dev/null bs=64k iflag=direct status=none; done`], {
    stdio: "inherit",
  });
  if (r.status !== 0) throw new Error(`the tenant's IO in ${cgroup} failed: ${r.status}`);
}

const MiB = 1 << 20;
/** A size as the dashboard prints it (ui/src/components/common.tsx, `bytes`). */
function sizeText(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${Number.isInteger(n) ? n : n.toFixed(1)} ${units[i]}`;
}

// ------------------------------------------------------------------------------------ the test

const BAD_YAML = `kind: Rule
spec:
  name: broken
  priority: 10
  match:
    tenant: analytics
   ops: [read]
  detours: []
`; // line 7 is indented wrong

const SCHEMA_ERROR = `kind: Rule
spec:
  name: bad-ops
  priority: 10
  match:
    tenant: analytics
    ops: [reed]
  detours:
    - what: io
      to:
        kind: stage
        target: cache/analytics
`; // line 7: "reed" is no op

// The verifier refuses it (write-loss: writes detoured by a header copy only, which hands the
// data to nobody; a header to the controller first would hold the IO, then let it go); line 4 names it.
const UNSAFE = `# writes with nowhere to go
kind: Rule
spec:
  name: writes-lost
  priority: 30
  match:
    tenant: analytics
    ops: [write]
  detours:
    - what: header
      to:
        kind: file
        target: /srv/audit
`;

// The tenant and rule the dashboard's editor opens with.
const GOOD = fs.readFileSync(path.join(UI, "src/examples/tenant-and-rule.yaml"), "utf8");

const policy = (cgroup) => `apiVersion: lachesis.dev/v1
kind: Policy
metadata:
  name: reports-cache
spec:
  tenants:
    - name: reports
      classifiers: [{kind: cgroup, value: ${cgroup}}]
  stages:
    - {name: cache/reports, kind: cache, owner: reports, size_bytes: 67108864}
  rules:
    - name: reports-cached
      priority: 20
      match: {tenant: reports}
      detours: [{what: io, to: {kind: stage, target: cache/reports}}]
`;
// line 14: a field the schema does not have
const badPolicy = (p) => p.replace("      priority: 20\n", "      priority: 20\n      colour: blue\n");
// a second rule the verifier refuses, named at line 16
const unsafePolicy = (p) =>
  p + "    - name: reports-writes-lost\n      priority: 21\n      match: {tenant: reports, ops: [write]}\n      detours: [{what: header, to: {kind: file, target: /srv/audit}}]\n";

async function setEditorText(page, text) {
  await page.click(".cm-content");
  await page.keyboard.press("Control+A");
  await page.keyboard.press("Delete");
  await page.keyboard.insertText(text);
}

async function shot(page, name) {
  const file = path.join(artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log("screenshot", file);
}

/** The editor's first mark, asserted at `line`. */
async function markedAt(page, line, what) {
  const err = await page.waitForSelector('[data-testid="editor-error"]');
  const at = await err.getAttribute("data-line");
  assert(at === String(line), `${what} is marked at line ${line}, got ${at}: ${await err.textContent()}`);
  return err.textContent();
}

/** Every agent's row of the rollout shown in `scope` reads applied. */
async function reachedEveryAgent(page, scope = "") {
  for (const h of HOSTS) {
    await page.waitForSelector(`${scope} [data-testid="target-${h}"] [data-testid="target-status"]:text("applied")`, { timeout: 20000 });
  }
}

async function signIn(browser, uiUrl, token) {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 860 } })).newPage();
  page.setDefaultTimeout(15000);
  await page.goto(uiUrl);
  await page.fill('[data-testid="token"]', token);
  await page.click('[data-testid="login"]');
  await page.waitForSelector(`[data-testid="host-row-${HOST}"]`);
  return page;
}

async function run() {
  const redisPort = await freePort();
  const apiPort = await freePort();
  apiUrl = `http://127.0.0.1:${apiPort}`;
  const redisUrl = `redis://127.0.0.1:${redisPort}/0`;
  fs.mkdirSync(path.join(tmp, "redis"));

  start("redis", ["redis-server", "--bind", "127.0.0.1", "--port", String(redisPort), "--dir", path.join(tmp, "redis"), "--save", "", "--appendonly", "no"]);
  start("controller", [CONTROLLER_BIN], {
    LACHESIS_DATABASE_URL: `sqlite:///${path.join(tmp, "lachesis.db")}`,
    LACHESIS_REDIS_URL: redisUrl,
    LACHESIS_BIND: `127.0.0.1:${apiPort}`,
    LACHESIS_API_TOKEN: TOKEN,
  });
  await waitFor("the controller's /readyz", async () => (await fetch(`${apiUrl}/readyz`)).status === 200, 60000, 200);
  const agentHelp = spawnSync(AGENT_BIN, ["run", "--help"], { encoding: "utf8" }).stdout ?? "";
  const telemetryArgs = agentHelp.includes("--telemetry-interval-ms") ? ["--telemetry-interval-ms", "500"] : [];
  for (const h of HOSTS) {
    // The controller hears enrolled hosts only; each agent runs as its own Redis user.
    const enrolled = await api("POST", `/api/v1/hosts/${h}/enrollment`);
    assert(enrolled.status === 201, `enrolment of ${h}: ${JSON.stringify(enrolled.body)}`);
    start(`agent-${h}`, [AGENT_BIN, "run", "--host-id", h, "--redis-url", enrolled.body.redis_url, "--device", `flash0=${path.join(tmp, `${h}-flash0.img`)}:256MiB`,
      "--heartbeat-interval-ms", "500", "--heartbeat-ttl-s", "3", ...telemetryArgs], { RUST_LOG: "info" });
  }
  for (const h of HOSTS) {
    await waitFor(`agent ${h} to register and ack generation 1`, async () => {
      const r = await api("GET", `/api/v1/hosts/${h}`);
      return r.status === 200 && r.body.acked_generation >= 1;
    }, 30000, 200);
  }
  const openapi = await (await fetch(`${apiUrl}/openapi.json`)).json();
  const has = (p) => p in openapi.paths;

  // The UI: from the controller if it serves /ui/, else ui/dist through vite preview.
  let uiUrl = `${apiUrl}/ui/`;
  const served = await fetch(uiUrl).then((r) => r.ok && r.text()).catch(() => null);
  if (!served || !served.includes('id="root"')) {
    const port = await freePort();
    start("vite-preview", [process.execPath, path.join(UI, "node_modules/vite/bin/vite.js"), "preview", "--host", "127.0.0.1", "--port", String(port), "--strictPort"], {
      LACHESIS_URL: apiUrl,
    });
    uiUrl = `http://127.0.0.1:${port}/ui/`;
    await waitFor("vite preview", async () => (await fetch(uiUrl)).ok, 30000, 200);
    log("the controller does not serve /ui/ yet: using vite preview at", uiUrl);
  } else {
    log("using the controller's /ui/");
  }

  const { chromium } = require("playwright-core");
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
    // playwright gives every launch a fresh temporary --user-data-dir of its own
  });
  const consoleErrors = [];
  const watch = (p) => p.on("pageerror", (e) => consoleErrors.push(String(e)));
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    page.setDefaultTimeout(15000);
    watch(page);

    // 1. Log in: a wrong token is refused, the right one shows every host alive.
    await page.goto(uiUrl);
    await page.fill('[data-testid="token"]', "wrong-token");
    await page.click('[data-testid="login"]');
    await page.waitForSelector('[data-testid="login-error"]');
    await shot(page, "01-login-refused");
    await page.fill('[data-testid="token"]', TOKEN);
    await page.click('[data-testid="login"]');
    for (const h of HOSTS) await page.waitForSelector(`[data-testid="host-row-${h}"] [data-testid="host-alive"]:text("alive")`);
    await page.waitForSelector('[data-testid="no-failing-checks"]');
    await shot(page, "02-overview");
    log("step 1 ok: logged in, both hosts alive");

    // 2. Bad YAML: marked at line 7, Apply disabled, nothing sent.
    await page.click('[data-testid="nav-editor"]');
    await page.waitForSelector(".cm-content");
    const rulesBefore = (await api("GET", "/api/v1/rules")).body;
    await setEditorText(page, BAD_YAML);
    await markedAt(page, 7, "the YAML error");
    assert(await page.isDisabled('[data-testid="apply"]'), "Apply is disabled while the YAML does not parse");
    await page.waitForSelector(".cm-lint-marker-error");
    await shot(page, "03-editor-yaml-error");

    // 3. A schema error the controller reports: marked at the line of the bad field, nothing applied.
    await setEditorText(page, SCHEMA_ERROR);
    await page.waitForSelector('[data-testid="editor-error"]', { state: "detached" });
    await page.click('[data-testid="apply"]');
    await markedAt(page, 7, "the schema error");
    await shot(page, "04-editor-schema-error");
    assert(JSON.stringify((await api("GET", "/api/v1/rules")).body) === JSON.stringify(rulesBefore), "refused input changed no rule");

    log("steps 2-3 ok: YAML and schema errors at line 7, nothing changed");

    // 4. Apply a tenant and a rule; the rollout reaches every agent.
    await setEditorText(page, GOOD);
    await page.waitForSelector('[data-testid="editor-error"]', { state: "detached" });
    await page.click('[data-testid="apply"]');
    await page.waitForSelector('[data-testid="applied"]');
    await reachedEveryAgent(page, '[data-testid="applied"]');
    await page.waitForSelector('[data-testid="rollout-state"]:text("succeeded")', { timeout: 20000 });
    await shot(page, "05-editor-applied-rollout");
    assert((await api("GET", "/api/v1/rules/analytics-reads-to-cache")).status === 200, "the rule exists after apply");
    log("step 4 ok: applied, the rollout reached every agent");

    // 4a. A rule the verifier refuses (its tenant exists now): marked at the rule's name,
    // nothing applied.
    const rulesApplied = (await api("GET", "/api/v1/rules")).body;
    await setEditorText(page, UNSAFE);
    await page.waitForSelector('[data-testid="editor-error"]', { state: "detached" });
    await page.click('[data-testid="apply"]');
    const unsafeText = await markedAt(page, 4, "the verifier's finding");
    assert(/write-loss/.test(unsafeText), `the mark names the verifier's check: ${unsafeText}`);
    await shot(page, "04b-editor-verifier-error");
    assert(JSON.stringify((await api("GET", "/api/v1/rules")).body) === JSON.stringify(rulesApplied), "a refused rule changed no rule");
    log("step 4a ok: the verifier's finding at line 4, nothing changed");

    // 4b. Policies: a schema error and a verifier failure at their line change nothing; Apply
    // waits for a dry run, which shows the per-host diff; the rollout reaches every agent.
    // The tenant of the policy gets a cgroup of its own, where step 5 makes real IO.
    const cgroup = makeTenantCgroup();
    // A classifier names the cgroup as /proc/PID/cgroup shows it (relative to the cgroup2
    // root, which is the mount's root on the host), not the host directory made for it.
    const POLICY = policy(cgroup ? `/${path.basename(cgroup)}` : "/reports");
    if (has("/api/v1/policies")) {
      await page.click('[data-testid="nav-policies"]');
      await page.waitForSelector(".cm-content");
      await setEditorText(page, badPolicy(POLICY));
      await page.click('[data-testid="dry-run-button"]');
      await markedAt(page, 14, "the policy schema error");
      await shot(page, "05b-policy-schema-error");
      await setEditorText(page, unsafePolicy(POLICY));
      await page.waitForSelector('[data-testid="editor-error"]', { state: "detached" });
      await page.click('[data-testid="dry-run-button"]');
      const finding = await markedAt(page, 16, "the policy's verifier finding");
      assert(/write-loss/.test(finding), `the mark names the verifier's check: ${finding}`);
      await shot(page, "05b2-policy-verifier-error");
      assert((await api("GET", "/api/v1/policies")).body.length === 0, "a refused policy applied nothing");
      await setEditorText(page, POLICY);
      assert(await page.isDisabled('[data-testid="apply-policy"]'), "Apply waits for a dry run");
      await page.click('[data-testid="dry-run-button"]');
      for (const h of HOSTS) await page.waitForSelector(`[data-testid="host-diff-${h}"]:has-text("reports-cached")`);
      assert((await api("GET", "/api/v1/policies")).body.length === 0, "a dry run applied nothing");
      await shot(page, "05c-policy-dry-run");
      await page.click('[data-testid="apply-policy"]');
      await reachedEveryAgent(page, '[data-testid="policy-applied"]');
      await page.waitForSelector('[data-testid="policy-row-reports-cache"]');
      await shot(page, "05d-policy-applied");
      log("step 4b ok: policy refused at lines 14 and 16, dry run diff, applied, the rollout reached every agent");
    } else {
      log("step 4b skipped: this controller has no /api/v1/policies");
    }

    // 5. The tenant page: the curve the agents measured from the tenant's real IO, with the
    // allocated size (the policy's 64 MiB cache) marked. The IO runs where the agents' eBPF
    // metrics engine can see it: in the tenant's own cgroup, O_DIRECT to the block layer.
    const noCgroup = "no cgroup v2 directory for the tenant's IO (needs root and a cgroup2 mount)";
    if (!cgroup && CI) throw new Error(`step 5: ${noCgroup}`);
    if (!cgroup) {
      log(`SKIP step 5: ${noCgroup}`);
    } else if (has("/api/v1/policies") && telemetryArgs.length) {
      tenantIo(cgroup, path.join(tmp, "reports.dat"));
      // Reports are told apart by their place in the stream and by what they counted, not by
      // clocks: a report after this mark counts the tenant's reads once it has all three passes
      // over the 32 MiB file (the agent may drain its eBPF events after a report was taken).
      const reads = (3 * 32 * MiB) / 4096;
      const redis = (...args) => spawnSync("redis-cli", ["-u", redisUrl, "--raw", ...args], { encoding: "utf8" }).stdout;
      const stream = (h) => `lachesis:agent:${h}:telemetry`;
      const marks = Object.fromEntries(HOSTS.map((h) => [h, redis("XREVRANGE", stream(h), "+", "-", "COUNT", "1").split("\n")[0].trim() || "0-0"]));
      const curve = await waitFor("an agent's telemetry with a curve for tenant reports", async () => {
        // --raw: one line per element: an entry's id, then its field and the message's JSON
        for (const line of HOSTS.flatMap((h) => redis("XRANGE", stream(h), `(${marks[h]}`, "+").split("\n"))) {
          if (!line.startsWith("{")) continue;
          const t = JSON.parse(line).tenants.find((x) => x.name === "reports" && x.curve);
          if (t && t.curve.references >= reads) return t.curve;
        }
        return null;
      }, 60000, 250);
      const above = curve.miss_ratios[curve.sizes.findIndex((s) => s > 40 << 20)];
      assert(curve.miss_ratios[0] === 1 && above < 0.5, `the measured curve has its knee at the 32 MiB file: ${JSON.stringify(curve)}`);
      log(`step 5: the agents measured the tenant's IO: ${curve.references} references, miss ratio ${above} above 32 MiB`);
      if (has("/api/v1/tenants/{name}/telemetry")) {
        await page.goto(`${uiUrl}#/tenants/reports`);
        await page.waitForSelector('[data-testid="tenant-detail"]');
        await page.waitForSelector('[data-testid="curve"] svg', { timeout: 30000 });
        // 64 MiB holds the whole 32 MiB file: two reads of three hit, as the agents measured.
        // The page draws the curve the controller serves, which is the latest report of either
        // host, not necessarily the one found above: the two agents count the same IO in
        // slightly different windows. So the caption is checked against the controller's
        // curve read at the same moment, and that curve must have its knee at the file too.
        const missAt = (points, size) => {
          const ps = points.map((p) => ({ size: p.size_bytes, miss: p.miss_ratio })).sort((a, b) => a.size - b.size);
          if (size <= ps[0].size) return ps[0].miss;
          for (let i = 1; i < ps.length; i++) {
            const [a, b] = [ps[i - 1], ps[i]];
            if (size <= b.size) return a.miss + ((b.miss - a.miss) * (size - a.size)) / (b.size - a.size || 1);
          }
          return ps[ps.length - 1].miss;
        };
        const caption = await waitFor("the caption of the measured curve", async () => {
          const text = await page.textContent('[data-testid="curve-caption"]');
          const m = /^Allocated 64 MiB: expected hit rate ([\d.]+)%/.exec(text ?? "");
          if (!m) return null;
          const servedCurve = (await api("GET", "/api/v1/tenants/reports/telemetry")).body?.curve;
          const served = servedCurve?.points;
          if (!served?.length || servedCurve.references < reads) return null;
          const miss = missAt(served, 64 * MiB);
          assert(miss < 0.5, `the served curve has its knee at the 32 MiB file: ${JSON.stringify(served)}`);
          return Math.abs(Number(m[1]) - (1 - miss) * 100) < 0.1 ? text : null;
        }, 30000, 250);
        await page.waitForSelector('[data-testid="tenant-stages"]:has-text("cache/reports")');
        await page.waitForSelector('[data-testid="rule-row-reports-cached"]');
        // The tenant keeps reading while the other pages are looked at: live IOPS, not a quiet system.
        start("tenant-io", ["sh", "-c", `echo $$ > ${cgroup}/cgroup.procs && while :; do dd if=${path.join(tmp, "reports.dat")} of=/dev/null bs=64k iflag=direct status=none; done`]);
        await page.waitForSelector('[data-testid="tenant-now"]');
        await shot(page, "06-tenant-curve");
        log("step 5 ok: the curve is drawn,", caption);
      } else {
        log("step 5: this controller has no tenant telemetry endpoint yet: the curve is not drawn");
      }
    } else {
      log("step 5 skipped: no policies or an agent without telemetry");
    }
    await page.goto(`${uiUrl}#/tenants/analytics`);
    await page.waitForSelector('[data-testid="tenant-detail"]');
    await page.waitForSelector('[data-testid="rule-row-analytics-reads-to-cache"]');
    await page.waitForSelector('[data-testid="curve"], [data-testid="curve-empty"]');
    await shot(page, "06b-tenant");

    // 6. Hosts and rules pages, updated live (the host's generation moved without a reload).
    // A placement of host-a's device (the controller's model) shows its streams and DLWA there.
    let placed = null;
    if (has("/api/v1/placements/{host_id}/{device}")) {
      placed = await api("POST", `/api/v1/placements/${HOST}/flash0`, {
        simulate: false,
        streams: [
          { tenant: "analytics", part: "loc", space: 0.5, writes: 0.3 },
          { tenant: "reports", part: "kset", space: 0.3, writes: 0.7 },
        ],
      });
      assert(placed.status === 200, `placement computed: ${JSON.stringify(placed.body)}`);
    }
    await page.click('[data-testid="nav-hosts"]');
    await page.waitForSelector(`[data-testid="host-${HOST}"] [data-testid="rule-row-analytics-reads-to-cache"]`);
    await page.waitForSelector(`[data-testid="devices-${HOST}"] [data-testid="device-row-flash0"]`);
    for (const h of HOSTS) {
      // the page shows the cached hosts at once and catches up without a reload
      const now = (await api("GET", `/api/v1/hosts/${h}`)).body;
      await page.waitForSelector(`[data-testid="host-row-${h}"] [data-testid="host-generation"]:text("${now.acked_generation} / ${now.desired_generation}")`);
    }
    if (placed) {
      const row = `[data-testid="devices-${HOST}"] [data-testid="device-row-flash0"]`;
      await page.waitForSelector(`${row}:has-text("analytics/loc"):has-text("reports/kset")`);
      const predicted = await page.textContent(`${row} [data-testid="device-dlwa-predicted"]`);
      assert(predicted.startsWith(placed.body.predicted_dlwa.toFixed(2)), `the predicted DLWA is shown: ${predicted}`);
    }
    await shot(page, "07-hosts");
    await page.click('[data-testid="nav-rules"]');
    await page.waitForSelector('[data-testid="rollouts-table"]');
    await page.waitForSelector('[data-testid="rule-row-analytics-reads-to-cache"]');
    await shot(page, "08-rules-rollouts");
    await page.click('[data-testid="nav-overview"]');
    const hostNow = (await api("GET", `/api/v1/hosts/${HOST}`)).body;
    await page.waitForSelector(`[data-testid="host-row-${HOST}"] [data-testid="host-generation"]:text("${hostNow.acked_generation} / ${hostNow.desired_generation}")`);
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="rollouts-table"] tbody tr').length >= 3);
    if (procs.some((p) => p.name === "tenant-io")) {
      // the reader's IO, as the agents count it, in the overview's totals and the tenant's row
      await page.waitForFunction(() => !["0", "—"].includes(document.querySelector('[data-testid="total-iops"]')?.textContent ?? "0"), null, { timeout: 15000 });
      await page.waitForFunction(() => !["0", "—"].includes(document.querySelector('[data-testid="tenant-row-reports"] td:nth-child(2)')?.textContent ?? "0"));
    }
    await shot(page, "09-overview-after-apply");
    log("step 6 ok: tenant, hosts, rules pages");

    // 6b. Cache stages: each stage's size per host as the controller allocates it, changed
    // through the REST API (Moirai's configure) and followed by the page without a reload.
    if (has("/api/v1/stages")) {
      const made = await api("POST", "/api/v1/stages", { name: "cache/analytics", kind: "cache", owner: "analytics", size_bytes: 32 * MiB });
      assert(made.status === 201, `stage created: ${JSON.stringify(made.body)}`);
      await page.click('[data-testid="nav-stages"]');
      /** The page shows, for every host of `name`, the allocated size the API reports (and, if given, that size). */
      const allocatedShown = (name, expected) =>
        waitFor(`the allocated size of ${name} on every host${expected ? ` (${sizeText(expected)})` : ""}`, async () => {
          const stage = (await api("GET", `/api/v1/stages/${name}`)).body;
          if (!stage.hosts.length) return false;
          for (const h of stage.hosts) {
            if (expected && h.allocated_bytes !== expected) return false;
            const shown = await page.textContent(`[data-testid="stage-${name}"] [data-testid="stage-host-${h.host_id}"] [data-testid="stage-allocated"]`, { timeout: 1000 }).catch(() => null);
            if (shown !== sizeText(h.allocated_bytes)) return false;
          }
          return stage.hosts.map((h) => h.host_id);
        });
      const reportsHosts = await allocatedShown("cache/reports");
      await allocatedShown("cache/analytics", 32 * MiB);
      const resized = await api("PATCH", "/api/v1/stages/cache/analytics", { size_bytes: 48 * MiB });
      assert(resized.status === 200, `stage resized: ${JSON.stringify(resized.body)}`);
      const hostsOfAnalytics = await allocatedShown("cache/analytics", 48 * MiB);
      assert(JSON.stringify(hostsOfAnalytics) === JSON.stringify(HOSTS), `the stage is on every host: ${hostsOfAnalytics}`);
      await page.waitForSelector(`[data-testid="stage-tenant-analytics"] [data-testid="tenant-allocated"]:text("${sizeText(48 * MiB * HOSTS.length)}")`);
      await page.waitForSelector('[data-testid="stage-cache/reports"] [data-testid="stage-source"]:text("policy/reports-cache")');
      await shot(page, "12-stages-allocated");
      log(`step 6b ok: cache/reports on ${reportsHosts.join(", ")}, cache/analytics resized to 48 MiB on every host, shown live`);
    } else {
      log("step 6b skipped: this controller has no /api/v1/stages");
    }

    // 6c. Devices: every agent's device as registered and as its telemetry measured it (kind,
    // placement handles, host and media bytes, DLWA and its history), beside the prediction of
    // the placement computed above.
    if (has("/api/v1/devices")) {
      await page.click('[data-testid="nav-devices"]');
      for (const h of HOSTS) {
        const row = `[data-testid="device-row-${h}-flash0"]`;
        const shown = await waitFor(`${h}'s flash0 as the API reports it`, async () => {
          const d = (await api("GET", "/api/v1/devices")).body.find((x) => x.host === h && x.name === "flash0");
          if (!d) return null;
          const cells = await page.$$eval(`${row} td`, (tds) => tds.map((td) => td.textContent));
          const expected = [h, "flash0", d.kind, String(d.placement_handles)];
          const dlwa = d.dlwa == null ? "—" : d.dlwa.toFixed(2);
          return JSON.stringify(cells.slice(0, 4)) === JSON.stringify(expected) && cells[6] === dlwa ? { kind: d.kind, dlwa, handles: d.placement_handles } : null;
        });
        await page.waitForSelector(`[data-testid="device-${h}-flash0"] [data-testid="dlwa-chart"] svg, [data-testid="device-${h}-flash0"] [data-testid="dlwa-chart-empty"]`);
        log(`step 6c: ${h} flash0: ${shown.kind}, ${shown.handles} placement handles, DLWA measured ${shown.dlwa}`);
      }
      if (placed) {
        const predicted = await page.textContent(`[data-testid="device-row-${HOST}-flash0"] [data-testid="row-dlwa-predicted"]`);
        assert(predicted.startsWith(placed.body.predicted_dlwa.toFixed(2)), `the predicted DLWA is beside the measured one: ${predicted}`);
        await page.waitForSelector(`[data-testid="device-${HOST}-flash0"] [data-testid="device-handles"]:has-text("analytics/loc"):has-text("reports/kset")`);
      }
      await shot(page, "13-devices");
      log("step 6c ok: every device with its measured and predicted DLWA");
    } else {
      log("step 6c skipped: this controller has no /api/v1/devices");
    }

    // 7. A viewer: every button that changes something is off before it tries, and says why.
    if (has("/api/v1/tokens")) {
      const made = await api("POST", "/api/v1/tokens", { name: "ui-viewer", role: "viewer" });
      assert(made.status === 201, `viewer token created: ${JSON.stringify(made.body)}`);
      const viewerPage = await signIn(browser, uiUrl, made.body.token);
      watch(viewerPage);
      await viewerPage.click('[data-testid="nav-editor"]');
      await viewerPage.waitForSelector(".cm-content");
      await setEditorText(viewerPage, GOOD.replace("Batch analytics jobs", "changed by a viewer"));
      if (await viewerPage.isEnabled('[data-testid="apply"]')) await viewerPage.click('[data-testid="apply"]');
      const why = await viewerPage.textContent('[data-testid="write-disabled-reason"]');
      assert(/ui-viewer.*viewer/.test(why), `the button says why: ${why}`);
      assert(await viewerPage.isDisabled('[data-testid="apply"]'), "Apply is disabled for a viewer");
      await shot(viewerPage, "10-viewer-refused");
      if (has("/api/v1/policies")) {
        await viewerPage.click('[data-testid="nav-policies"]');
        await viewerPage.waitForSelector('[data-testid="dry-run-button"]');
        assert(await viewerPage.isDisabled('[data-testid="dry-run-button"]'), "Dry run is disabled for a viewer");
      }
      const tenant = (await api("GET", "/api/v1/tenants/analytics")).body;
      assert(tenant.description === "Batch analytics jobs", "the viewer changed nothing");
      log("step 7 ok: viewer refused, the buttons say why:", why);

      // 8. A tenant token sees its tenant only.
      if (has("/api/v1/policies")) {
        const scoped = await api("POST", "/api/v1/tokens", { name: "ui-reports", role: "viewer", tenant: "reports" });
        assert(scoped.status === 201, `tenant token created: ${JSON.stringify(scoped.body)}`);
        const tenantPage = await signIn(browser, uiUrl, scoped.body.token);
        watch(tenantPage);
        await tenantPage.waitForSelector('[data-testid="who"]:has-text("viewer of reports")');
        await tenantPage.waitForSelector('[data-testid="tenant-row-reports"]');
        assert((await tenantPage.$('[data-testid="tenant-row-analytics"]')) === null, "the overview lists no other tenant");
        await tenantPage.click('[data-testid="nav-tenants"]');
        await tenantPage.waitForSelector('[data-testid="tenant-detail"] h1:text("reports")');
        const listed = await tenantPage.$$eval(".sidelist li", (els) => els.map((e) => e.textContent));
        assert(JSON.stringify(listed) === JSON.stringify(["reports"]), `the tenant list is its tenant only: ${listed}`);
        await shot(tenantPage, "11-tenant-token");
        if (has("/api/v1/stages")) {
          // its own cache stage only; devices are everyone's: not offered
          await tenantPage.click('[data-testid="nav-stages"]');
          await tenantPage.waitForSelector('[data-testid="stage-cache/reports"] [data-testid="stage-allocated"]');
          assert((await tenantPage.$('[data-testid="stage-cache/analytics"]')) === null, "the stages page shows no other tenant's stage");
          assert((await tenantPage.$('[data-testid="nav-devices"]')) === null, "a tenant token is not offered the devices page");
        }
        await tenantPage.goto(`${uiUrl}#/tenants/analytics`);
        await tenantPage.waitForSelector('[role="alert"]:has-text("may not read tenant")');
        log("step 8 ok: the tenant token sees reports only");
      }
    } else {
      log("steps 7-8 skipped: this controller has no /api/v1/tokens (roles not merged yet)");
    }
    assert(!consoleErrors.length, `no uncaught errors in the page: ${consoleErrors.join("; ")}`);
  } finally {
    await browser.close();
  }
}

const missing = prerequisites();
if (missing.length) {
  const msg = `missing prerequisite${missing.length > 1 ? "s" : ""}: ${missing.join(", ")}`;
  if (CI) {
    console.error(`FAIL (CI=true): ${msg}`);
    process.exit(1);
  }
  console.log(`SKIP: ${msg}`);
  process.exit(0);
}

tmp = fs.mkdtempSync(path.join(os.tmpdir(), "lachesis-ui-e2e-"));
artifacts = process.env.LACHESIS_UI_ARTIFACTS ?? path.join(tmp, "screenshots");
fs.mkdirSync(artifacts, { recursive: true });

const timer = setTimeout(() => {
  console.error("FAIL: the UI e2e run took longer than 300 s");
  console.error(logs());
  stopAll().finally(() => process.exit(1));
}, 300000);

let code = 0;
try {
  await run();
  log(`PASS; screenshots in ${artifacts}`);
} catch (e) {
  code = 1;
  console.error(`FAIL: ${e && e.stack ? e.stack : e}`);
  console.error(logs());
  console.error(`screenshots in ${artifacts}`);
} finally {
  clearTimeout(timer);
  await stopAll();
  // Keep the logs and screenshots; drop the bulky state (device image, database, redis data).
  for (const f of [...HOSTS.map((h) => `${h}-flash0.img`), "reports.dat", "lachesis.db", "redis"]) fs.rmSync(path.join(tmp, f), { recursive: true, force: true });
  const cg = cgroup2Mount() && path.join(cgroup2Mount(), `lachesis-ui-e2e-${process.pid}`);
  try {
    if (cg) fs.rmdirSync(cg); // a cgroup is removed with rmdir, once its processes are gone
  } catch {
    /* never made, or already gone */
  }
}
process.exit(code);
