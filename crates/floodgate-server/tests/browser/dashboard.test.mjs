// The dashboard in a real browser: the real `floodgate` binary, traffic against it, headless
// Chromium (the system's /usr/bin/chromium) driven by playwright-core.
//
// Checks: the live chart shows decisions/s; a flooding key appears in the top offenders; rollback
// after an applied configuration changes the version; the playground's burst shows the refused
// count of both algorithms (token bucket 8 @ 2/s: 2 of 10; sliding window 5 / 5 s: 5 of 10); the
// boundary preset shows the fixed window's 2x burst; the key inspector shows a tenant's spend in dollars, and, on a
// second server whose clock the test moves (--manual-clock), last month's spend beside this month's. Saves a screenshot of each panel under
// target/dashboard-screenshots/. Exits non-zero on any failure.
//
//   FLOODGATE_BIN=target/debug/floodgate node dashboard.test.mjs

import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../../../..");
const binary = resolve(root, process.env.FLOODGATE_BIN || "target/debug/floodgate");
const shots = resolve(root, "target/dashboard-screenshots");
mkdirSync(shots, { recursive: true });

const CONFIG = `store: { kind: memory }
rules:
  - name: login-per-ip
    match: { route: "POST /login" }
    key: [ip]
    algorithm: sliding_window
    limit: 5
    window: 10s
  - name: api-per-user
    key: [user]
    algorithm: token_bucket
    rate: 20/s
    burst: 40
  - name: tenant-spend
    key: [tenant]
    algorithm: quota
    limit: 50000000
    period: month
    cost: usd_micros
`;
const CHANGED = CONFIG.replace("limit: 5\n", "limit: 8\n") + `  - name: global-guard
    key: []
    algorithm: gcra
    rate: 5000/s
    burst: 500
`;

const work = mkdtempSync(join(tmpdir(), "floodgate-dashboard-"));
const configPath = join(work, "floodgate.yaml");
writeFileSync(configPath, CONFIG);

let server, lastMonth, browser, traffic;
const fail = (message) => { throw new Error(message); };

function start(extra = []) {
  return new Promise((resolveStart, reject) => {
    const child = spawn(binary, ["serve", "--config", configPath, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--no-watch", "--log-format", "json", ...extra], { stdio: ["ignore", "ignore", "pipe"] });
    let buffer = "";
    const timer = setTimeout(() => reject(new Error("the server did not say where it listens within 20 s")), 20000);
    child.stderr.on("data", (chunk) => {
      buffer += chunk;
      for (const line of buffer.split("\n")) {
        try {
          const entry = JSON.parse(line);
          if (entry.event === "serving" && entry.http) { clearTimeout(timer); resolveStart({ child, base: `http://${entry.http}` }); }
        } catch (_) { /* a partial line */ }
      }
    });
    child.on("exit", (code) => reject(new Error(`the server exited (${code}) before serving: ${buffer}`)));
  });
}

async function post(base, path, body, type = "application/json") {
  const response = await fetch(base + path, { method: "POST", body, headers: { "content-type": type } });
  return { status: response.status, json: await response.json().catch(() => null) };
}

// ~60 decisions a second: ordinary users within their limits, and one address flooding /login.
function runTraffic(base) {
  let stopped = false;
  const check = (descriptors) => fetch(base + "/v1/check", { method: "POST", body: JSON.stringify({ descriptors }) }).then((r) => r.arrayBuffer()).catch(() => {});
  (async () => {
    for (let i = 0; !stopped; i++) {
      const batch = [check({ route: "POST /login", ip: "203.0.113.66" }), check({ route: "POST /login", ip: "203.0.113.66" })];
      batch.push(check({ route: "GET /items", user: `user-${i % 7}`, ip: `10.0.0.${i % 7}` }));
      if (i % 10 === 0) batch.push(check({ route: "POST /login", ip: `198.51.100.${i % 50}` }));
      await Promise.all(batch);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return () => { stopped = true; };
}

async function shoot(page, selector, name) {
  const path = join(shots, `${name}.png`);
  await page.locator(selector).screenshot({ path });
  console.log(`screenshot: ${path}`);
}

async function main() {
  const started = await start();
  server = started.child;
  const base = started.base;
  traffic = runTraffic(base);

  // A fresh profile directory (playwright passes it as --user-data-dir).
  browser = await chromium.launchPersistentContext(join(work, "profile"), {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 900 },
  });
  const page = browser.pages()[0] || (await browser.newPage());
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  page.on("request", (r) => { if (!r.url().startsWith(base)) problems.push(`request outside the server: ${r.url()}`); });
  page.on("dialog", (d) => d.accept());

  await page.goto(base + "/dashboard");

  // The live chart shows decisions.
  await page.waitForFunction(() => Number(document.querySelector("#traffic-chart").dataset.decisionsPerS) > 0, null, { timeout: 20000 });
  const perSecond = await page.locator("#traffic-chart").getAttribute("data-decisions-per-s");
  console.log(`live chart: ${perSecond} decisions/s`);
  await page.waitForFunction(() => Number(document.querySelector("#traffic-chart").dataset.denialsPerS) > 0, null, { timeout: 20000 });

  // The flooding address is the top offender of the login rule.
  const flooder = page.locator('#offenders .offender[data-key="ip=203.0.113.66"]');
  await flooder.waitFor({ timeout: 20000 });
  const firstOffender = await page.locator("#offenders .offender").first().getAttribute("data-key");
  if (firstOffender !== "ip=203.0.113.66") fail(`the flooding key is not on top: ${firstOffender}`);
  console.log(`top offender: ${firstOffender} (${await flooder.locator(".num").textContent()})`);
  await page.waitForFunction(() => document.querySelectorAll("#rules tbody canvas.spark").length === 3, null, { timeout: 10000 });
  // Let a few more seconds of history fill the charts before the pictures.
  await page.waitForTimeout(4000);
  await shoot(page, "#panel-traffic", "traffic");
  await shoot(page, "#panel-rules", "rules");
  await shoot(page, "#panel-offenders", "offenders");
  await shoot(page, "#panel-store", "store");
  if (!(await page.locator("#store").textContent()).includes("memory")) fail("the store panel does not name the store");

  // Rollback after an applied configuration changes the version.
  const applied = await post(base, "/admin/config", CHANGED, "application/yaml");
  if (applied.status !== 200 || applied.json.version !== 2) fail(`applying a configuration: ${JSON.stringify(applied)}`);
  await page.waitForFunction(() => document.querySelector("#config-version").dataset.version === "2", null, { timeout: 10000 });
  await page.locator("#audit li", { hasText: "global-guard" }).first().waitFor({ timeout: 10000 });
  await shoot(page, "#panel-config", "config-applied");
  await page.locator("#rollback").click();
  await page.waitForFunction(() => document.querySelector("#config-version").dataset.version === "3", null, { timeout: 10000 });
  const rolled = await (await fetch(base + "/admin/config")).json();
  if (rolled.version !== 3 || rolled.text !== CONFIG) fail(`after rollback: version ${rolled.version}, text restored: ${rolled.text === CONFIG}`);
  await page.locator("#audit li", { hasText: "restored v1" }).first().waitFor({ timeout: 10000 });
  console.log(`rollback: version ${rolled.version}, the first configuration in force again`);
  await shoot(page, "#panel-config", "config-rolled-back");

  // The key inspector reads and resets the flooding key.
  await page.selectOption("#key-rule", "login-per-ip");
  await page.fill("#key-descriptors", "ip=203.0.113.66, route=POST /login");
  await page.click('#key-form button[type="submit"]');
  await page.locator("#key-result table").waitFor({ timeout: 10000 });
  const inspected = await page.locator("#key-result").textContent();
  if (!inspected.includes("limit5")) fail(`key inspector: ${inspected}`);
  await shoot(page, "#panel-keys", "keys");
  // A tenant's spend this month, in dollars: $12.34 of its $50.
  const spent = await fetch(started.base + "/v1/check", { method: "POST", body: JSON.stringify({ descriptors: { tenant: "acme" }, costs: { usd_micros: 12340000 } }) });
  if (spent.status !== 200) fail(`spending: ${spent.status} ${await spent.text()}`);
  await page.selectOption("#key-rule", "tenant-spend");
  await page.fill("#key-descriptors", "tenant=acme");
  await page.click('#key-form button[type="submit"]');
  await page.locator("#key-result", { hasText: "usd_micros" }).waitFor({ timeout: 10000 }).catch(async () => fail(`spend: ${await page.locator("#key-result").textContent()}`));
  const spend = await page.locator("#key-result").textContent();
  console.log(`key inspector, spend: ${spend}`);
  if (!spend.includes("used$12.34") || !spend.includes("limit$50.00") || !spend.includes("remaining$37.66")) fail(`spend in dollars: ${spend}`);
  await shoot(page, "#panel-keys", "keys-spend");

  // The playground: a burst of 10 through both algorithms.
  await page.fill("#burst-size", "10");
  await page.click("#send-burst", { position: { x: 8, y: 8 } });
  await page.waitForFunction(() => document.querySelector("#side-a").dataset.refused !== undefined && document.querySelector("#side-b").dataset.refused !== undefined, null, { timeout: 10000 });
  await page.waitForFunction(() => Number(document.querySelector("#side-a").dataset.passed) + Number(document.querySelector("#side-a").dataset.refused) === 10, null, { timeout: 10000 });
  const refusedBucket = await page.locator("#side-a .refused").textContent();
  const refusedWindow = await page.locator("#side-b .refused").textContent();
  console.log(`playground burst of 10: token bucket refused ${refusedBucket}, sliding window refused ${refusedWindow}`);
  if (refusedBucket !== "2" || refusedWindow !== "5") fail(`burst of 10: bucket refused ${refusedBucket} (expected 2), window refused ${refusedWindow} (expected 5)`);
  const retry = await page.locator("#side-a .refusals li").first().textContent();
  if (!/Retry-After \d+ ms/.test(retry)) fail(`no Retry-After in the refusals: ${retry}`);
  await page.waitForTimeout(1500);
  await shoot(page, "#panel-playground", "playground-burst");

  // The boundary preset: the fixed window passes 10 within 2 s, the sliding log 5.
  await page.click("#preset-boundary");
  await page.waitForFunction(() => document.querySelector("#side-a").dataset.passed === "10" && document.querySelector("#side-b").dataset.passed === "5", null, { timeout: 10000 });
  await shoot(page, "#panel-playground", "playground-boundary");

  // A narrow window: everything in one column, nothing wider than the page.
  await page.setViewportSize({ width: 420, height: 900 });
  await page.waitForTimeout(500);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 0) fail(`the page is ${overflow}px wider than a 420px window`);
  await page.screenshot({ path: join(shots, "narrow.png"), fullPage: false });
  await page.setViewportSize({ width: 1280, height: 900 });
  await page.screenshot({ path: join(shots, "page.png"), fullPage: true });

  if (problems.length) fail(problems.join("\n"));
  await previousPeriod();
  console.log("dashboard browser test: ok");
}

// Last month's spend: a second server on a manual clock (2026-01-20T12:00Z), $12.34 spent in January,
// the clock moved to 1 February and $1.50 spent: the key inspector shows both, in dollars.
async function previousPeriod() {
  const january20 = 1768910400000, february = 1769904000000;
  const second = await start(["--manual-clock", String(january20)]);
  lastMonth = second.child;
  const spend = async (usdMicros) => {
    const r = await fetch(second.base + "/v1/check", { method: "POST", body: JSON.stringify({ descriptors: { tenant: "acme" }, costs: { usd_micros: usdMicros } }) });
    if (r.status !== 200) fail(`spending: ${r.status} ${await r.text()}`);
  };
  await spend(12340000);
  const moved = await post(second.base, "/admin/clock", JSON.stringify({ set_ms: february }));
  if (moved.status !== 200) fail(`moving the clock: ${JSON.stringify(moved)}`);
  await spend(1500000);
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
  await page.goto(second.base + "/dashboard");
  await page.selectOption("#key-rule", "tenant-spend");
  await page.fill("#key-descriptors", "tenant=acme");
  await page.click('#key-form button[type="submit"]');
  await page.locator("#key-result", { hasText: "previous period" }).waitFor({ timeout: 10000 }).catch(async () => fail(`previous period: ${await page.locator("#key-result").textContent()}`));
  const shown = await page.locator("#key-result").textContent();
  console.log(`key inspector, last month: ${shown}`);
  if (!shown.includes("used$1.50") || !shown.includes("previous period$12.34 (2026-01-01 00:00 to 2026-02-01 00:00)")) fail(`last month's spend: ${shown}`);
  await shoot(page, "#panel-keys", "keys-previous-period");
  if (problems.length) fail(problems.join("\n"));
  await page.close();
}

try {
  await main();
} catch (e) {
  console.error(`dashboard browser test FAILED: ${e.stack || e}`);
  process.exitCode = 1;
} finally {
  if (traffic) traffic();
  if (browser) await browser.close().catch(() => {});
  if (server) server.kill("SIGTERM");
  if (lastMonth) lastMonth.kill("SIGTERM");
  rmSync(work, { recursive: true, force: true });
}
