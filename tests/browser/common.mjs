// tests/browser/common.mjs: what the dashboard's browser tests (dashboard.mjs, dashboard_async.mjs,
// dashboard_long.mjs) share: Debian's chromium started headless by playwright-core ($CHROMIUM, as
// tests/lib.sh need_browser found it), a sleep, and a wait for a condition.
import { chromium } from "playwright-core";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// until(what, fn, ms): fn's first truthy value, tried every 100 ms; throws "timed out waiting for: what".
export async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("timed out waiting for: " + what);
    await sleep(100);
  }
}

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
}
