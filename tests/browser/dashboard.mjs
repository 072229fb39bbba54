// dashboard.mjs: drive the coordinator dashboard of a live run in headless Chromium (playwright-core,
// Debian's /usr/bin/chromium) and check every change in Redis. Run by tests/it_http_dashboard.sh:
//
//   DASH_URL=http://127.0.0.1:PORT/dashboard REDIS_PORT=P RUN=R [TOKEN=T] [SCREENSHOT=docs/dashboard.png] \
//     node tests/browser/dashboard.mjs
//
// playwright-core is pinned to 1.61 (package.json): the newest line that still runs on Debian 12's nodejs 18.
//
// Checks: the page loads with nothing fetched from outside this server and no script error; the live
// workers appear in the table; with TOKEN (server started with --token-file) a change without the token
// is refused and shown, then the token is entered in the page; the outer lr set through the page lands in dl:{R}:tunables; a worker kicked
// through the page (confirm dialog accepted) is evicted (its incarnation ends, a "kicked" event is
// recorded); Save state writes a checkpoint when the server has --save-dir; the charts have data (the
// validation-loss chart draws at least 2 evaluations of the run's evaluator); then a screenshot of the page.
import { execFileSync } from "node:child_process";
import { launchChromium, sleep, until } from "./common.mjs";

const url = process.env.DASH_URL;
const redisPort = process.env.REDIS_PORT;
const run = process.env.RUN;
const token = process.env.TOKEN || "";
const shot = process.env.SCREENSHOT || "";
const lrWanted = process.env.NEW_LR || "0.45";
if (!url || !redisPort || !run) {
  console.error("set DASH_URL, REDIS_PORT and RUN");
  process.exit(2);
}

const rcli = (...args) => execFileSync("redis-cli", ["-p", redisPort, ...args], { encoding: "utf8" }).trim();
function workerInc(id) {
  // the record is msgpack; its incarnation is visible through dl_status (JSON)
  const doc = JSON.parse(rcli("FCALL", "dl_status", "1", `dl:{${run}}:config`));
  const ws = Array.isArray(doc.workers) ? doc.workers : [];
  const w = ws.find((x) => x.id === id);
  return w ? w.inc : null;
}

const origin = new URL(url).origin;
const browser = await launchChromium();
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const outside = [], errors = [];
  page.on("request", (r) => { if (!r.url().startsWith(origin) && !r.url().startsWith("data:")) outside.push(r.url()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  // the browser logs the refused request of the no-token check (401) as a console error: expected
  page.on("console", (m) => { if (m.type() === "error" && !/status of 401/.test(m.text())) errors.push(m.text()); });
  page.on("dialog", (d) => { console.log("dialog:", d.message()); d.accept(); });

  await page.goto(url, { waitUntil: "load" });
  // 1. the workers of the run are in the table
  await page.waitForFunction(() => document.querySelectorAll("#workers tbody tr[data-worker]").length >= 2,
                             null, { timeout: 15000 });
  const ids = await page.$$eval("#workers tbody tr[data-worker]", (rs) => rs.map((r) => r.dataset.worker));
  console.log("workers on the page:", ids.join(", "));
  for (const w of ["w1", "w2"]) if (!ids.includes(w)) throw new Error(`worker ${w} missing from the table`);
  const hostCell = await page.textContent('#workers tr[data-worker="w1"] td:nth-child(3)');
  if (!hostCell || !hostCell.trim()) throw new Error("worker host column is empty");
  // the Redis topology line names the server the run is on
  const redisLine = await page.textContent("#redis");
  console.log("redis on the page:", redisLine);
  if (!new RegExp(`^single · master 127\\.0\\.0\\.1:${redisPort}$`).test(redisLine))
    throw new Error("the Redis line does not show the master 127.0.0.1:" + redisPort + ": " + redisLine);

  if (token) {
    // the server wants a token: the page shows the field, and without it a change is refused
    if (!(await page.isVisible("#token"))) throw new Error("token field hidden although the server requires a token");
    const lr0 = rcli("HGET", `dl:{${run}}:tunables`, "outer_lr");
    await page.fill("#lr", "0.123");
    await page.click("#apply-opt");
    await page.waitForFunction(() => /update_optimizer failed: .*Bearer/.test(document.getElementById("msg").textContent),
                               null, { timeout: 5000 });
    if (rcli("HGET", `dl:{${run}}:tunables`, "outer_lr") !== lr0) throw new Error("outer_lr changed without the token");
    console.log("without the token:", await page.textContent("#msg"));
    await page.fill("#token", token);
  }

  // 2. outer lr through the page -> dl:{R}:tunables outer_lr
  const lrBefore = rcli("HGET", `dl:{${run}}:tunables`, "outer_lr");
  await page.fill("#lr", lrWanted);
  await page.click("#apply-opt");
  await page.waitForFunction(() => /update_optimizer: ok/.test(document.getElementById("msg").textContent),
                             null, { timeout: 5000 }).catch(async () => {
    throw new Error("page did not confirm update_optimizer: " + await page.textContent("#msg"));
  });
  const lrAfter = await until("outer_lr in Redis", () => {
    const v = rcli("HGET", `dl:{${run}}:tunables`, "outer_lr");
    return Number(v) === Number(lrWanted) ? v : null;
  });
  console.log(`outer_lr ${lrBefore} -> ${lrAfter} (Redis)`);

  // 3. kick w1 through the page -> its incarnation is evicted and a "kicked" event recorded
  const incBefore = workerInc("w1");
  if (incBefore == null) throw new Error("w1 is not a member before the kick");
  const deathsBefore = Number(rcli("HGET", `dl:{${run}}:state`, "deaths"));
  await page.click('#workers tr[data-worker="w1"] button.kick');
  await page.waitForFunction(() => /kick_worker: ok/.test(document.getElementById("msg").textContent),
                             null, { timeout: 5000 }).catch(async () => {
    throw new Error("page did not confirm kick_worker: " + await page.textContent("#msg"));
  });
  const incAfter = workerInc("w1");
  if (incAfter === incBefore) throw new Error(`w1 still a member with incarnation ${incBefore} after the kick`);
  const deathsAfter = Number(rcli("HGET", `dl:{${run}}:state`, "deaths"));
  if (deathsAfter !== deathsBefore + 1) throw new Error(`deaths ${deathsBefore} -> ${deathsAfter}, expected +1`);
  const ev = rcli("XREVRANGE", `dl:{${run}}:events`, "+", "-", "COUNT", "200");
  if (!new RegExp(`kicked\\s+worker\\s+w1\\s+inc\\s+${incBefore}\\b`).test(ev)) throw new Error("no kicked event for w1 in the stream");
  console.log(`w1 kicked: incarnation ${incBefore} -> ${incAfter ?? "gone"} (re-registers later), deaths ${deathsAfter}`);

  // 4. Save state (the server runs with --save-dir): the page reports the checkpoint it wrote
  if (await page.isEnabled("#save-state")) {
    await page.click("#save-state");
    await page.waitForFunction(() => /save_state: ok \(.*checkpoint-\d+\.safetensors/.test(document.getElementById("msg").textContent),
                               null, { timeout: 30000 }).catch(async () => {
      throw new Error("page did not confirm save_state: " + await page.textContent("#msg"));
    });
    console.log("save state:", await page.textContent("#msg"));
  } else console.log("save state: button disabled (no --save-dir)");

  // 5. the charts and the shard map have data; the page keeps updating
  await page.waitForFunction(() => document.querySelectorAll("#shardmap .shard").length >= 2, null, { timeout: 5000 });
  await sleep(Number(process.env.SETTLE_MS || 4000)); // a few polls: loss history, live workers
  // the validation-loss chart: the document has evaluations and the canvas has pixels of its colour
  const evalChart = await page.evaluate(() => {
    const c = document.getElementById("evalchart"), g = c.getContext("2d");
    const px = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < px.length; i += 4) if (px[i] === 0xd2 && px[i + 1] === 0xa8 && px[i + 2] === 0xff) n++;
    return { evals: S.doc.evals.length, pixels: n };
  });
  console.log(`validation-loss chart: ${evalChart.evals} evaluations, ${evalChart.pixels} pixels drawn`);
  if (evalChart.evals < 2 || evalChart.pixels < 20) throw new Error("the validation-loss chart has no points");
  const metricLr = await page.textContent("#metrics");
  if (!metricLr.includes(String(Number(lrWanted)))) throw new Error("metrics panel does not show the new lr: " + metricLr);

  if (outside.length) throw new Error("the page fetched from outside its server: " + outside.join(", "));
  if (errors.length) throw new Error("script errors on the page: " + errors.join(" | "));
  if (shot) {
    await page.screenshot({ path: shot, fullPage: true });
    console.log("screenshot:", shot);
  }
  console.log("dashboard OK");
} catch (e) {
  failed = true;
  console.error("FAIL:", e.message);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
