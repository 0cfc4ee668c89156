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
const { env, out, poll, texts, statusText, errorToasts, toastTexts, palette, openFile, problems, hoverAt, quickFix, run } =
  require("./lib");

run(async (page) => {
    // A header activates the extension; the configured server command does not exist yet.
    await openFile(page, "demo.h");
    out("FAILED_START", await poll("the failed start", () => statusText(page), (t) => /server stopped/.test(t)));

    // Edited and saved while no server runs: the save must not be lost.
    await openFile(page, "demo.c");
    await page.keyboard.press("Control+End");
    await page.keyboard.type("// edited before the server ran\n");
    await page.keyboard.press("Control+S");

    // The user fixes the server command in the remote settings (where `machine` settings live in a remote window,
    // which code-server's is) while the workbench runs: the extension must recover.
    fs.writeFileSync(env.K3_SETTINGS, env.K3_GOOD_SETTINGS);
    await openFile(page, "demo.c");
    const rows = await problems(page, 2);
    out("PROBLEMS", rows);
    out("STATUS", await poll("idle", () => statusText(page), (t) => /k3: idle/.test(t)));
    out("ERROR_TOASTS", await errorToasts(page));

    await palette(page, "k3lsp: Restart Server");
    out("RESTARTING", await poll("the restart", () => statusText(page), (t) => !/idle/.test(t), 10000));
    out("RESTARTED", await problems(page, 2));
    out("STATUS_RESTARTED", await poll("idle", () => statusText(page), (t) => /k3: idle/.test(t)));

    out("HOVER", await (await hoverAt(page, Number(env.K3_FINDING_LINE))).innerText());
    await page.keyboard.press("Escape");

    await palette(page, "k3lsp: Show Backend Status");
    const status = await poll("the backend status", () => toastTexts(page), (t) => t.some((x) => /endpoint/.test(x)));
    out("BACKEND_STATUS", status.find((x) => /endpoint/.test(x)));

    const fix = await quickFix(page, Number(env.K3_FINDING_LINE), "Apply suggested fix");
    out("ACTIONS", await texts(page, ".action-widget .monaco-list-row"));
    await fix.click();
    await page.keyboard.press("Control+S");
    out("FIXED", await poll("the fix on disk", () => fs.readFileSync(env.K3_FILE, "utf8"), (t) => t.includes(env.K3_FIX)));
});
