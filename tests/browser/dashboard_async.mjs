// dashboard_async.mjs: the dashboard of a live async run (2 fragments, Delayed Nesterov) in headless
// Chromium (playwright-core). Run by tests/it_http_dashboard.sh:
//
//   DASH_URL=http://127.0.0.1:PORT/dashboard DN=N node tests/browser/dashboard_async.mjs
//
// Checks: the "DN buffer" tile shows what each fragment's buffer holds of N; "submissions applied" is shown
// and the sync barrier's "pending submissions" is not; the worker table has the staleness column with each
// worker's last / mean / max.
import { launchChromium } from "./common.mjs";

const url = process.env.DASH_URL, dn = process.env.DN;
const browser = await launchChromium();
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelectorAll("#workers tbody tr[data-worker]").length >= 2,
                             null, { timeout: 15000 });
  const tiles = Object.fromEntries(await page.$$eval("#metrics > div",
    (ds) => ds.map((d) => [d.querySelector("span").textContent, d.querySelector("b").textContent])));
  console.log("tiles:", JSON.stringify(tiles));
  if (!new RegExp(`^\\d+ · \\d+ of ${dn}$`).test(tiles["DN buffer"] ?? ""))
    throw new Error(`no "DN buffer" tile of 2 fragments of ${dn}: ${tiles["DN buffer"]}`);
  if (!(+tiles["submissions applied"] > 0)) throw new Error(`submissions applied: ${tiles["submissions applied"]}`);
  if ("pending submissions" in tiles) throw new Error("an async run shows the sync barrier's pending submissions");
  const head = await page.$$eval("#workers thead th", (ts) => ts.filter((t) => !t.hidden).map((t) => t.textContent));
  if (!head.includes("stale last/mean/max")) throw new Error("no staleness column: " + head.join("|"));
  const stale = await page.$$eval("#workers tbody td.stale", (ts) => ts.map((t) => t.textContent));
  console.log("staleness on the page:", stale.join(", "));
  if (stale.length < 2 || !stale.every((t) => /^\d+ \/ [\d.]+ \/ \d+$/.test(t)))
    throw new Error("worker staleness cells: " + stale.join(", "));
  if (errors.length) throw new Error("page errors: " + errors.join("; "));
  console.log("async dashboard ok");
} catch (e) {
  console.error("FAIL:", e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
