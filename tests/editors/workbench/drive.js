"use strict";
/**
 * Drives the real VS Code workbench (code-server) in headless Chromium through playwright-core, as a person
 * would: keyboard, palette, editor, Problems panel, hovers, quick fixes, status bar and notifications.
 *
 * Run by tests/editors/test_vscode_workbench.py, which starts code-server and a scripted daemon and checks
 * what this prints: one `TAG {json}` line per observation, `END true` when every step ran. Each wait is
 * bounded; on any failure a screenshot is written to $K3_SCREENSHOT and its path printed.
 */
const fs = require("node:fs");
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

async function main() {
  const started = Date.now();
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
  try {
    await page.goto(`${env.K3_URL}?folder=${encodeURIComponent(env.K3_WORKSPACE)}`);
    await page.locator(".monaco-workbench .part.statusbar").waitFor({ timeout: WAIT });
    out("LOADED", Date.now() - started);

    // A header activates the extension; the configured server command does not exist yet.
    await openFile(page, "demo.h");
    out("FAILED_START", await poll("the failed start", () => statusText(page), (t) => /server stopped/.test(t)));

    // Edited and saved while no server runs: the save must not be lost.
    await openFile(page, "demo.c");
    await page.keyboard.press("Control+End");
    await page.keyboard.type("// edited before the server ran\n");
    await page.keyboard.press("Control+S");

    // The user fixes the settings in settings.json while the workbench runs: the extension must recover.
    await palette(page, "Preferences: Open User Settings (JSON)");
    const settings = page.locator(".monaco-editor .view-lines", { hasText: "k3lsp.server.path" }).last();
    await settings.click({ timeout: WAIT });
    await page.keyboard.press("Control+A");
    await page.evaluate((text) => navigator.clipboard.writeText(text), env.K3_GOOD_SETTINGS); // pasted: no auto-closing
    await page.keyboard.press("Control+V");
    await page.keyboard.press("Control+S");
    await poll("the settings on disk", () => fs.readFileSync(env.K3_SETTINGS, "utf8"), (t) => t.includes("server.python"));
    await page.keyboard.press("Control+W");
    await openFile(page, "demo.c");
    const rows = await problems(page, 2);
    out("PROBLEMS", rows);
    out("STATUS", await poll("idle", () => statusText(page), (t) => /k3: idle/.test(t)));
    out("ERROR_TOASTS", await errorToasts(page));

    await palette(page, "k3lsp: Restart Server");
    out("RESTARTING", await poll("the restart", () => statusText(page), (t) => !/idle/.test(t), 10000));
    out("RESTARTED", await problems(page, 2));
    out("STATUS_RESTARTED", await poll("idle", () => statusText(page), (t) => /k3: idle/.test(t)));

    await page.locator(".monaco-editor .view-lines").first().click();
    await goToLine(page, Number(env.K3_FINDING_LINE));
    await page.keyboard.press("Control+K");
    await page.keyboard.press("Control+I");
    const hover = page.locator(".monaco-hover:visible", { hasText: "CWE-" }).first();
    await hover.waitFor({ timeout: WAIT });
    await page.waitForTimeout(1500); // let every hover provider answer
    out("HOVER", await hover.innerText());
    await page.keyboard.press("Escape");

    await palette(page, "k3lsp: Show Backend Status");
    const status = await poll("the backend status", () => toastTexts(page), (t) => t.some((x) => /endpoint/.test(x)));
    out("BACKEND_STATUS", status.find((x) => /endpoint/.test(x)));

    await page.locator(".monaco-editor .view-lines").first().click();
    await goToLine(page, Number(env.K3_FINDING_LINE));
    await page.keyboard.press("Control+.");
    const fix = page.locator(".action-widget .monaco-list-row", { hasText: "Apply suggested fix" }).first();
    await fix.waitFor({ timeout: WAIT });
    out("ACTIONS", await texts(page, ".action-widget .monaco-list-row"));
    await fix.click();
    await page.keyboard.press("Control+S");
    out("FIXED", await poll("the fix on disk", () => fs.readFileSync(env.K3_FILE, "utf8"), (t) => t.includes(env.K3_FIX)));
    out("END", true);
  } catch (error) {
    await page.screenshot({ path: env.K3_SCREENSHOT, fullPage: true }).catch(() => undefined);
    out("SCREENSHOT", env.K3_SCREENSHOT);
    out("ERROR", String(error && error.stack ? error.stack : error));
    out("END", false);
  } finally {
    out("ELAPSED", Date.now() - started);
    await context.close();
  }
}

main().catch((error) => {
  out("ERROR", String(error));
  process.exitCode = 1;
});
