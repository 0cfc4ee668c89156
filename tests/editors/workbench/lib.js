"use strict";
/**
 * What the workbench drivers (drive.js, attack.js) share: printing observations, bounded polling, and the
 * keyboard and palette moves of a person (open a file, go to a line, run a command, read the Problems panel).
 */
const { chromium } = require(process.env.K3_PLAYWRIGHT);

const env = process.env;
const WAIT = 60000;

function out(tag, value) {
  process.stdout.write(`${tag} ${JSON.stringify(value === undefined ? null : value)}\n`);
}

async function poll(what, read, until, timeout = WAIT) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await read();
    if (until(last)) {
      return last;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last)}`);
}

async function texts(page, selector) {
  return page.$$eval(selector, (nodes) => nodes.map((n) => n.innerText.trim()));
}

const statusText = async (page) => (await texts(page, ".statusbar-item")).find((t) => /^k3(:|$)/.test(t)) ?? "";
const errorToasts = (page) =>
  page.$$eval(".notifications-toasts .notification-toast", (nodes) =>
    nodes
      .filter((n) => n.querySelector(".codicon-error"))
      .map((n) => n.querySelector(".notification-list-item-message")?.innerText.trim() ?? ""),
  );
const toastTexts = (page) => texts(page, ".notifications-toasts .notification-list-item-message");
const problemRows = (page) => texts(page, ".markers-panel .monaco-list-row");

async function palette(page, command) {
  await page.keyboard.press("F1");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: WAIT });
  await input.fill(`>${command}`);
  const row = page.locator(".quick-input-list .monaco-list-row").filter({ has: page.getByText(command, { exact: true }) });
  await row.first().click({ timeout: WAIT });
}

async function openFile(page, name) {
  await page.keyboard.press("Control+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: WAIT });
  await input.fill(name);
  await page.locator(".quick-input-list .monaco-list-row", { hasText: name }).first().waitFor({ timeout: WAIT });
  await page.keyboard.press("Enter");
  await page.locator(".tab.active", { hasText: name }).waitFor({ timeout: WAIT });
  await page.locator(".monaco-editor .view-lines").first().click();
}

async function goToLine(page, line) {
  await page.keyboard.press("Control+G");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: WAIT });
  await input.fill(`:${line}`);
  await page.keyboard.press("Enter");
  await page.keyboard.press("End");
}

async function problems(page, count) {
  await palette(page, "View: Focus Problems");
  return poll(`${count} problems`, () => problemRows(page), (rows) => rows.filter((r) => /CWE-/.test(r)).length >= count);
}

/** The hover of the finding on `line` (opened with Ctrl+K Ctrl+I), once every hover provider had time to answer. */
async function hoverAt(page, line) {
  await page.locator(".monaco-editor .view-lines").first().click();
  await goToLine(page, line);
  await page.keyboard.press("Control+K");
  await page.keyboard.press("Control+I");
  const hover = page.locator(".monaco-hover:visible", { hasText: "CWE-" }).first();
  await hover.waitFor({ timeout: WAIT });
  await page.waitForTimeout(1500); // let every hover provider answer
  return hover;
}

/** The quick-fix menu on `line` (Ctrl+.), once it offers `label`: that row. */
async function quickFix(page, line, label) {
  await page.locator(".monaco-editor .view-lines").first().click();
  await goToLine(page, line);
  await page.keyboard.press("Control+.");
  const row = page.locator(".action-widget .monaco-list-row", { hasText: label }).first();
  await row.waitFor({ timeout: WAIT });
  return row;
}

/** Chromium on the workbench's URL with the workspace open; resolves once the status bar is there. */
async function openWorkbench(started) {
  const context = await chromium.launchPersistentContext(env.K3_PROFILE, {
    executablePath: env.K3_CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 900 },
    args: [
      "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync",
    ],
  });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(env.K3_URL).origin });
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(`${env.K3_URL}?folder=${encodeURIComponent(env.K3_WORKSPACE)}`);
  await page.locator(".monaco-workbench .part.statusbar").waitFor({ timeout: WAIT });
  out("LOADED", Date.now() - started);
  return { context, page };
}

/** Runs `scenario(page)`; on a failure a screenshot, the error, and `END false`; always the elapsed time. */
async function run(scenario) {
  const started = Date.now();
  let context;
  let page;
  try {
    ({ context, page } = await openWorkbench(started));
    await scenario(page);
    out("END", true);
  } catch (error) {
    await page?.screenshot({ path: env.K3_SCREENSHOT, fullPage: true }).catch(() => undefined);
    out("SCREENSHOT", env.K3_SCREENSHOT);
    out("ERROR", String(error && error.stack ? error.stack : error));
    out("END", false);
  } finally {
    out("ELAPSED", Date.now() - started);
    await context?.close();
  }
}

module.exports = {
  WAIT, env, out, poll, texts, statusText, errorToasts, toastTexts, problemRows, palette, openFile, goToLine, problems,
  hoverAt, quickFix, run,
};
