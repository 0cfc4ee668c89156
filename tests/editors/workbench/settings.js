"use strict";
/**
 * Every k3lsp setting in the real workbench: with all of them set (test_settings_vscode.py writes them), open a C
 * file and show the backend status, whose JSON (with the server's effective `settings`) goes to the k3lsp output
 * channel; then the remote settings get bad values, and the server must say so in ONE error notification; the
 * status is shown again to see the valid settings still apply.
 */
const fs = require("node:fs");
const { env, out, poll, toastTexts, errorToasts, palette, openFile, run } = require("./lib");

async function showStatus(page) {
  await palette(page, "Notifications: Clear All Notifications");
  await palette(page, "k3lsp: Show Backend Status");
  await poll("the backend status", () => toastTexts(page), (t) => t.some((x) => /endpoint/.test(x)));
}

run(async (page) => {
  await openFile(page, "demo.c");
  await showStatus(page);
  out("GOOD_ERRORS", await errorToasts(page));

  await palette(page, "Notifications: Clear All Notifications");
  fs.writeFileSync(env.K3_SETTINGS, env.K3_BAD_SETTINGS);
  await poll("the settings message", () => errorToasts(page), (t) => t.some((x) => /cpcheck/.test(x)));
  // A second message for the same problems would come with the same read: the status is one more round trip.
  await palette(page, "k3lsp: Show Backend Status");
  await poll("the backend status", () => toastTexts(page), (t) => t.some((x) => /endpoint/.test(x)));
  out("BAD_ERRORS", await errorToasts(page));
});
