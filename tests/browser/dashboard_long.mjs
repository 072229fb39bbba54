// dashboard_long.mjs: the dashboard of a run of weeks, in headless Chromium (playwright-core, Debian's
// /usr/bin/chromium). Run by tests/it_http_dashboard_long.sh:
//
//   DASH_URL=http://127.0.0.1:PORT/dashboard node tests/browser/dashboard_long.mjs
//
// A page left open for weeks keeps what it drew: a loss series per worker id it ever saw (up to 2000 points
// each) and the live-workers series. The charts took the minimum and maximum of all their points with
// Math.min(...xs), which throws past some 125,000 arguments ("Maximum call stack size exceeded"): from then on
// every poll ended in "status unavailable" and nothing on the page moved again. 63 workers reach it in about
// an hour at the 2 s refresh; churn sooner (each new id, such as the default <hostname>-<pid>, a series
// kept for ever). The page's memory is seeded here as an hour of churn leaves it: 1000 departed workers of
// 150 points each. Checks: the next polls render ("updated ..."), the departed workers' series are gone,
// and no series holds a point older than the chart's 30-minute window.
import { launchChromium, sleep, until } from "./common.mjs";

const url = process.env.DASH_URL;
if (!url) {
  console.error("set DASH_URL");
  process.exit(2);
}

const browser = await launchChromium();
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  const conn = () => page.evaluate(() => document.getElementById("conn").textContent);
  await until("the first poll", async () => (await conn()).startsWith("updated"), 15000);
  await until("a loss point of the live worker", () => page.evaluate(() => S.loss.size > 0), 15000);
  const live = await page.evaluate(() => [...S.loss.keys()]);
  // an hour of churn: 1000 workers gone, 150 points each over the last hour (half of them older than the window)
  await page.evaluate(() => {
    const now = Date.now();
    for (let w = 0; w < 1000; w++) {
      const pts = [];
      for (let i = 0; i < 150; i++) pts.push([now - 3600e3 + (w * 150 + i) * 24, 3 - i / 100, i]);
      S.loss.set("gone-" + w, pts);
    }
    for (let i = 0; i < 3000; i++) S.live.push([now - 3600e3 + i * 1200, 1, 1]);
    document.getElementById("conn").textContent = "seeded";
  });
  console.log("seeded 150,000 loss points of 1000 departed workers");
  const c = await until("a poll after the seeding", async () => { const t = await conn(); return t !== "seeded" && t; }, 15000);
  if (!c.startsWith("updated")) throw new Error(`the page stopped rendering: "${c}"`);
  const left = await page.evaluate(() => ({
    ids: [...S.loss.keys()],
    oldest: Math.min(Date.now(), ...[...S.loss.values()].map((a) => (a.length ? a[0][0] : Date.now()))),
    live: S.live.length ? S.live[0][0] : Date.now(),
  }));
  if (left.ids.some((w) => w.startsWith("gone-")))
    throw new Error(`${left.ids.filter((w) => w.startsWith("gone-")).length} departed workers' series kept`);
  if (!live.every((w) => left.ids.includes(w))) throw new Error(`the live worker's series went: ${left.ids}`);
  const window = 30 * 60 * 1000 + 60 * 1000;
  if (Date.now() - left.oldest > window) throw new Error(`a loss point ${Math.round((Date.now() - left.oldest) / 1000)} s old kept`);
  if (Date.now() - left.live > window) throw new Error(`a live-workers point ${Math.round((Date.now() - left.live) / 1000)} s old kept`);
  if (errors.length) throw new Error("page errors: " + errors.join("; "));
  console.log(`rendered after the seeding ("${c}"); series kept: ${left.ids.join(",")}`);
} catch (e) {
  console.error("FAIL: " + e.message);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
