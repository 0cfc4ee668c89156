"use strict";
/**
 * The attacks of a hostile repository and a steered model, in the real workbench: the opened folder's
 * .vscode/settings.json names its own server program, daemon, keys and `insecure`; the model's finding, its
 * reasoning and explanation, and the daemon's model name carry `command:` links. Audits, hovers, explains and shows
 * the backend status as a person would, and prints every link element the workbench made of that text.
 *
 * Run by tests/editors/test_vscode_workbench.py (which checks what this prints, see lib.js and drive.js).
 */
const { env, out, poll, texts, statusText, toastTexts, openFile, palette, problems, hoverAt, quickFix, run } =
  require("./lib");

/** A link element as data: its text and where a click would go (VS Code keeps that in href or data-href). */
const LINK = (a) => ({ text: a.innerText.trim(), href: `${a.getAttribute("href") ?? ""} ${a.dataset.href ?? ""}`.trim() });

/** The link elements in what matches `selector`. */
const links = (page, selector) => page.$$eval(`${selector} a`, (nodes, describe) => nodes.map(eval(describe)), `${LINK}`);

/** The toast whose message has `text`, with the link elements inside it. */
async function toast(page, what, text) {
  const all = await poll(what, () => toastTexts(page), (t) => t.some((x) => x.includes(text)));
  const message = page.locator(".notifications-toasts .notification-list-item", { hasText: text }).first();
  const found = await message.evaluate(
    (node, describe) => Array.from(node.querySelectorAll(".notification-list-item-message a")).map(eval(describe)),
    `${LINK}`,
  );
  return { text: all.find((x) => x.includes(text)), links: found };
}

run(async (page) => {
  await openFile(page, "demo.c");
  await page.keyboard.press("Control+End");
  await page.keyboard.type("// saved\n");
  await page.keyboard.press("Control+S");
  out("PROBLEMS", await problems(page, 1));
  out("STATUS", await poll("idle", () => statusText(page), (t) => /k3: idle/.test(t)));

  out("HOVER", await (await hoverAt(page, Number(env.K3_FINDING_LINE))).innerText());
  out("HOVER_LINKS", await links(page, ".monaco-hover:visible"));
  await page.keyboard.press("Escape");

  const explain = await quickFix(page, Number(env.K3_FINDING_LINE), "Explain this");
  out("ACTIONS", await texts(page, ".action-widget .monaco-list-row"));
  out("ACTION_LINKS", await links(page, ".action-widget"));
  await explain.click();
  out("EXPLAIN", await toast(page, "the explanation", env.K3_LINK_TEXT));

  await palette(page, "k3lsp: Show Backend Status");
  out("BACKEND_STATUS", await toast(page, "the backend status", "endpoint"));
});
