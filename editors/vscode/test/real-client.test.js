"use strict";
/**
 * The extension with the REAL vscode-languageclient, starting a real stdio server process
 * (support/echo-server.js, which records what it receives). Checks what the fakes cannot: that the
 * library spawns the server with no arguments, that server commands sharing the extension's ids
 * do not break the start, and what settings actually go over the wire.
 */
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { defaultsSent, loadExtension } = require("./support/fakes");
const { eventually } = require("./support/wait");

const ECHO_SERVER = path.join(__dirname, "support", "echo-server.js");

function received(log) {
  if (!fs.existsSync(log)) {
    return [];
  }
  return fs.readFileSync(log, "utf8").trim().split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

for (const client of ["real", "bundle"]) {
  test(`${client} client: spawn, settings on the wire, status bar, commands, shutdown`, { timeout: 60000 }, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "k3lsp-vscode-"));
    t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
    const log = path.join(dir, "received.jsonl");
    process.env.K3LSP_ECHO_LOG = log;
    const { extension, context, vscode } = loadExtension(
      {
        "server.path": ECHO_SERVER,
        "server.python": "",
        "trace.server": "off",
        endpoint: "",
        trigger: "manual",
        minSeverity: "high",
        include: null,
        exclude: ["gen/**"],
        thinkingEffort: "high",
      },
      { client },
    );
    try {
      await extension.activate(context);
      const item = vscode.statusItems[0];
      await eventually("the k3lsp/status notification", () => item.text, (text) =>
        text === "$(sync~spin) k3: auditing 3",
      );

      const [initialize] = received(log);
      assert.equal(initialize.method, "initialize");
      assert.deepEqual(initialize.params.argv, [], "k3lsp with no arguments is LSP on stdio");
      const { include, insecure, ...untouched } = defaultsSent(); // include: null is left to the server
      const expected = { ...untouched, trigger: "manual", minSeverity: "high", exclude: ["gen/**"], thinkingEffort: "high" };
      assert.deepEqual(initialize.params.initializationOptions, { ...expected, insecure });
      assert.ok(include);
      const messages = await eventually(
        "configuration answers",
        () => received(log),
        (m) => m.some((x) => x.method === "configuration-result") && m.some((x) => x.method === "didChangeConfiguration"),
      );
      // insecure is a connection setting: initializationOptions only.
      assert.deepEqual(messages.find((m) => m.method === "configuration-result").params, [expected]);
      // The library's announcement (the server reads the settings again rather than trusting it) has what was set.
      const announced = messages.find((m) => m.method === "didChangeConfiguration").params.settings.k3lsp;
      for (const key of ["trigger", "minSeverity", "exclude", "thinkingEffort"]) {
        assert.deepEqual(announced[key], expected[key], key);
      }

      // The library registered the server's other commands; ours stayed ours and forward the uri.
      assert.ok(vscode.commands.has("k3lsp.explain"));
      vscode.api.window.activeTextEditor = { document: { uri: vscode.api.Uri.file("/w/drv.c") } };
      await vscode.api.commands.executeCommand("k3lsp.auditFile");
      await vscode.api.commands.executeCommand("k3lsp.explain", "fp-1");
      await vscode.api.commands.executeCommand("k3lsp.showStatus");
      const commands = received(log).filter((m) => m.method === "executeCommand").map((m) => m.params);
      assert.deepEqual(commands, [
        { command: "k3lsp.auditFile", arguments: ["file:///w/drv.c"] },
        { command: "k3lsp.explain", arguments: ["fp-1"] },
        { command: "k3lsp.status", arguments: [] },
      ]);
      assert.deepEqual(
        vscode.messages.filter((m) => m.level !== "info").map((m) => m.text),
        [],
        "no error or warning was shown",
      );
      assert.equal(
        vscode.messages.at(-1).text,
        "k3 backend: endpoint tcp://127.0.0.1:5555, model echo, ranks 1, queue 2 (1 active), loop rate 0.0%, stop rate 100.0%",
      );
    } finally {
      await extension.deactivate();
    }
    await eventually("shutdown", () => received(log), (m) => m.some((x) => x.method === "shutdown"));
    assert.equal(vscode.statusItems[0].text, "$(error) k3: server stopped");
    assert.equal(vscode.commands.has("k3lsp.explain"), false, "the stopped client unregisters server commands");
  });
}

for (const client of ["real", "bundle"]) {
  test(`${client} client: after a failed start, deactivate resolves though the channel is closed`, { timeout: 30000 }, async () => {
    const exitsAtOnce = ["/bin/false", "/usr/bin/false"].find((p) => fs.existsSync(p));
    const { extension, context, vscode } = loadExtension({ "server.path": exitsAtOnce, "server.python": "" }, { client });
    await extension.activate(context);
    await eventually("the failed start", () => vscode.statusItems[0].tooltip, (tip) => tip.includes("could not start"));
    context.subscriptions.forEach((d) => d.dispose()); // the workbench disposes the subscriptions too
    await extension.deactivate(); // must not reject (it did with "Channel has been closed")
  });
}
