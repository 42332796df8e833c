#!/usr/bin/env node
// The dashboard in a real browser (Debian's chromium driven by playwright-core) against a real
// redis-server, controller and agent: log in, see the host alive, create a tenant and a rule
// through the YAML editor and see the rollout reach the agent, have bad YAML and a schema error
// marked at their line with nothing changed, open the tenant, and be refused as a viewer.
//
//   node e2e/ui/dashboard.test.mjs        (after `cd ui && npm ci && npm run build`)
//
// The UI is taken from the controller at /ui/ when it serves it; otherwise ui/dist is served
// by `vite preview`, which proxies /api to the controller. Screenshots go to
// $LACHESIS_UI_ARTIFACTS (default: a fresh temporary directory, printed at the end).
// Under CI=true a missing prerequisite (chromium, redis-server, the agent, the controller,
// ui/dist) fails the run; otherwise it skips.

import { spawn } from "node:child_process";
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
const AGENT_BIN = path.join(ROOT, "agents/target/release/lachesis-agent");
const CONTROLLER_BIN = process.env.LACHESIS_CONTROLLER_BIN ?? path.join(ROOT, ".lachesis/venv/bin/lachesis-controller");
const TOKEN = "ui-e2e-token";
const HOST = "host-a";
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
  if (!which("redis-server")) missing.push("redis-server (apt-get install -y redis-server)");
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

async function waitFor(what, predicate, timeoutMs = 15000, intervalMs = 100) {
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

const GOOD = `kind: Tenant
spec:
  name: analytics
  description: Batch analytics jobs
  classifiers:
    - kind: cgroup
      value: /sys/fs/cgroup/analytics
---
kind: Rule
spec:
  name: analytics-reads-to-cache
  priority: 10
  match:
    tenant: analytics
    ops: [read]
    path_prefix: /data/
  detours:
    - what: io
      to:
        kind: stage
        target: cache/analytics
`;

const POLICY = `apiVersion: lachesis.dev/v1
kind: Policy
metadata:
  name: reports-cache
spec:
  tenants:
    - name: reports
      classifiers: [{kind: cgroup, value: /sys/fs/cgroup/reports}]
  stages:
    - {name: cache/reports, kind: cache, owner: reports, size_bytes: 1073741824}
  rules:
    - name: reports-cached
      priority: 20
      match: {tenant: reports}
      detours: [{what: io, to: {kind: stage, target: cache/reports}}]
`;
// line 14: a field the schema does not have
const BAD_POLICY = POLICY.replace("      priority: 20\n", "      priority: 20\n      colour: blue\n");

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
  start("agent", [AGENT_BIN, "run", "--host-id", HOST, "--redis-url", redisUrl,
    "--device", `flash0=${path.join(tmp, "flash0.img")}:64MiB`, "--heartbeat-interval-ms", "500", "--heartbeat-ttl-s", "3"], { RUST_LOG: "info" });
  await waitFor("the agent to register and ack generation 1", async () => {
    const r = await api("GET", `/api/v1/hosts/${HOST}`);
    return r.status === 200 && r.body.acked_generation >= 1;
  }, 30000, 200);

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
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
    const page = await context.newPage();
    page.setDefaultTimeout(15000);
    const consoleErrors = [];
    page.on("pageerror", (e) => consoleErrors.push(String(e)));

    // 1. Log in: a wrong token is refused, the right one shows the host alive.
    await page.goto(uiUrl);
    await page.fill('[data-testid="token"]', "wrong-token");
    await page.click('[data-testid="login"]');
    await page.waitForSelector('[data-testid="login-error"]');
    await shot(page, "01-login-refused");
    await page.fill('[data-testid="token"]', TOKEN);
    await page.click('[data-testid="login"]');
    await page.waitForSelector(`[data-testid="host-row-${HOST}"] [data-testid="host-alive"]:text("alive")`);
    await page.waitForSelector('[data-testid="no-failing-checks"]');
    await shot(page, "02-overview");
    log("step 1 ok: logged in, host alive");

    // 2. Bad YAML: marked at line 7, Apply disabled, nothing sent.
    await page.click('[data-testid="nav-editor"]');
    await page.waitForSelector(".cm-content");
    const rulesBefore = (await api("GET", "/api/v1/rules")).body;
    await setEditorText(page, BAD_YAML);
    const parseErr = await page.waitForSelector('[data-testid="editor-error"]');
    const parseLine = await parseErr.getAttribute("data-line");
    assert(parseLine === "7", `the YAML error is marked at line 7, got ${parseLine}: ${await parseErr.textContent()}`);
    assert(await page.isDisabled('[data-testid="apply"]'), "Apply is disabled while the YAML does not parse");
    await page.waitForSelector(".cm-lint-marker-error");
    await shot(page, "03-editor-yaml-error");

    // 3. A schema error the controller reports: marked at the line of the bad field, nothing applied.
    await setEditorText(page, SCHEMA_ERROR);
    await page.waitForSelector('[data-testid="editor-error"]', { state: "detached" });
    await page.click('[data-testid="apply"]');
    const schemaErr = await page.waitForSelector('[data-testid="editor-error"]');
    const schemaLine = await schemaErr.getAttribute("data-line");
    assert(schemaLine === "7", `the schema error is marked at line 7, got ${schemaLine}: ${await schemaErr.textContent()}`);
    await shot(page, "04-editor-schema-error");
    const rulesAfter = (await api("GET", "/api/v1/rules")).body;
    assert(JSON.stringify(rulesAfter) === JSON.stringify(rulesBefore), "refused input changed no rule");
    log("steps 2-3 ok: YAML and schema errors at line 7, nothing changed");

    // 4. Apply a tenant and a rule; the rollout reaches the agent.
    await setEditorText(page, GOOD);
    await page.waitForSelector('[data-testid="editor-error"]', { state: "detached" });
    await page.click('[data-testid="apply"]');
    await page.waitForSelector('[data-testid="applied"]');
    await page.waitForSelector(`[data-testid="target-${HOST}"] [data-testid="target-status"]:text("applied")`, { timeout: 20000 });
    await page.waitForSelector('[data-testid="rollout-state"]:text("succeeded")', { timeout: 20000 });
    await shot(page, "05-editor-applied-rollout");
    const rule = await api("GET", "/api/v1/rules/analytics-reads-to-cache");
    assert(rule.status === 200, "the rule exists after apply");
    log("step 4 ok: applied, rollout reached the agent");

    // 4b. Policies (where the controller has them): a schema error at its line changes nothing;
    // Apply waits for a dry run, which shows the per-host diff; the rollout reaches the agent.
    const openapi = await (await fetch(`${apiUrl}/openapi.json`)).json();
    if (openapi.paths["/api/v1/policies"]) {
      await page.click('[data-testid="nav-policies"]');
      await page.waitForSelector(".cm-content");
      await setEditorText(page, BAD_POLICY);
      await page.click('[data-testid="dry-run-button"]');
      const policyErr = await page.waitForSelector('[data-testid="editor-error"]');
      const policyLine = await policyErr.getAttribute("data-line");
      assert(policyLine === "14", `the policy schema error is marked at line 14, got ${policyLine}: ${await policyErr.textContent()}`);
      await shot(page, "05b-policy-schema-error");
      assert((await api("GET", "/api/v1/policies")).body.length === 0, "a refused policy applied nothing");
      await setEditorText(page, POLICY);
      assert(await page.isDisabled('[data-testid="apply-policy"]'), "Apply waits for a dry run");
      await page.click('[data-testid="dry-run-button"]');
      await page.waitForSelector(`[data-testid="host-diff-${HOST}"]:has-text("reports-cached")`);
      assert((await api("GET", "/api/v1/policies")).body.length === 0, "a dry run applied nothing");
      await shot(page, "05c-policy-dry-run");
      await page.click('[data-testid="apply-policy"]');
      await page.waitForSelector(`[data-testid="policy-applied"] [data-testid="target-${HOST}"] [data-testid="target-status"]:text("applied")`, { timeout: 20000 });
      await page.waitForSelector('[data-testid="policy-row-reports-cache"]');
      await shot(page, "05d-policy-applied");
      await page.goto(`${uiUrl}#/tenants/reports`);
      await page.waitForSelector('[data-testid="tenant-stages"]:has-text("cache/reports")');
      await page.waitForSelector('[data-testid="rule-row-reports-cached"]');
      await shot(page, "05e-tenant-with-policy-cache");
      log("step 4b ok: policy refused at line 14, dry run diff, applied, rollout reached the agent");
    } else {
      log("step 4b skipped: this controller has no /api/v1/policies");
    }

    // 5. The tenant page: classifiers, its rule, and the curve placeholder (no curve reported).
    await page.goto(`${uiUrl}#/tenants/analytics`);
    await page.waitForSelector('[data-testid="tenant-detail"]');
    await page.waitForSelector('[data-testid="rule-row-analytics-reads-to-cache"]');
    await page.waitForSelector('[data-testid="curve"], [data-testid="curve-empty"]');
    await shot(page, "06-tenant");

    // 6. Hosts and rules pages, updated live (the host's generation moved without a reload).
    await page.click('[data-testid="nav-hosts"]');
    await page.waitForSelector(`[data-testid="host-${HOST}"] [data-testid="rule-row-analytics-reads-to-cache"]`);
    await shot(page, "07-hosts");
    await page.click('[data-testid="nav-rules"]');
    await page.waitForSelector('[data-testid="rollouts-table"]');
    await page.waitForSelector('[data-testid="rule-row-analytics-reads-to-cache"]');
    await shot(page, "08-rules-rollouts");
    await page.click('[data-testid="nav-overview"]');
    const hostNow = (await api("GET", `/api/v1/hosts/${HOST}`)).body;
    await page.waitForSelector(`[data-testid="host-row-${HOST}"] [data-testid="host-generation"]:text("${hostNow.acked_generation} / ${hostNow.desired_generation}")`);
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="rollouts-table"] tbody tr').length >= 3);
    await shot(page, "09-overview-after-apply");
    log("steps 5-6 ok: tenant, hosts, rules pages");

    // 7. A viewer is refused and the buttons say why (where the controller has tokens).
    if (openapi.paths["/api/v1/tokens"]) {
      const made = await api("POST", "/api/v1/tokens", { name: "ui-viewer", role: "viewer" });
      assert(made.status === 201, `viewer token created: ${JSON.stringify(made.body)}`);
      const viewerPage = await (await browser.newContext({ viewport: { width: 1280, height: 860 } })).newPage();
      viewerPage.setDefaultTimeout(15000);
      await viewerPage.goto(uiUrl);
      await viewerPage.fill('[data-testid="token"]', made.body.token);
      await viewerPage.click('[data-testid="login"]');
      await viewerPage.waitForSelector(`[data-testid="host-row-${HOST}"]`);
      await viewerPage.click('[data-testid="nav-editor"]');
      await viewerPage.waitForSelector(".cm-content");
      await setEditorText(viewerPage, GOOD.replace("Batch analytics jobs", "changed by a viewer"));
      if (await viewerPage.isEnabled('[data-testid="apply"]')) await viewerPage.click('[data-testid="apply"]');
      await viewerPage.waitForSelector('[data-testid="write-disabled-reason"]');
      assert(await viewerPage.isDisabled('[data-testid="apply"]'), "Apply is disabled for a viewer");
      await shot(viewerPage, "10-viewer-refused");
      const tenant = (await api("GET", "/api/v1/tenants/analytics")).body;
      assert(tenant.description === "Batch analytics jobs", "the viewer changed nothing");
      log("step 7 ok: viewer refused, the button says why");
    } else {
      log("step 7 skipped: this controller has no /api/v1/tokens (roles not merged yet)");
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
  console.error("FAIL: the UI e2e run took longer than 180 s");
  console.error(logs());
  stopAll().finally(() => process.exit(1));
}, 180000);

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
  for (const f of ["flash0.img", "lachesis.db", "redis"]) fs.rmSync(path.join(tmp, f), { recursive: true, force: true });
}
process.exit(code);
