"use strict";
/** Activation, commands, status bar and shutdown of the compiled extension, against fakes. */
const test = require("node:test");
const assert = require("node:assert/strict");
const os = require("node:os");
const path = require("node:path");
const { OUT, defaultsSent, loadExtension, Uri, State } = require("./support/fakes");
const { eventually } = require("./support/wait");

const manifest = require("../package.json");
const config = require(path.join(OUT, "config.js"));
const DEFAULTS_SENT = defaultsSent();

async function activated(settings = {}) {
  const loaded = loadExtension(settings);
  await loaded.extension.activate(loaded.context);
  return loaded;
}

function onlyClient(lc) {
  assert.equal(lc.clients.length, 1, "exactly one client is created");
  return lc.clients[0];
}

test("activation starts a stdio client running `k3lsp` with no arguments", async () => {
  const { lc } = await activated();
  const client = onlyClient(lc);
  assert.equal(client.id, "k3lsp", "the id makes `k3lsp.trace.server` the trace setting");
  assert.deepEqual(client.serverOptions, { command: "k3lsp", args: [] });
  assert.equal(client.started, 1);
  assert.ok(client.isRunning());
});

test("k3lsp.server.path is used, with ~ expanded", async () => {
  const { lc } = await activated({ "server.path": "~/bin/k3lsp" });
  assert.deepEqual(onlyClient(lc).serverOptions, { command: path.join(os.homedir(), "bin/k3lsp"), args: [] });
});

test("k3lsp.server.python runs `python -I -m k3lsp` and wins over the path", async () => {
  const { lc } = await activated({ "server.path": "/opt/k3lsp", "server.python": "/w/.venv/bin/python" });
  assert.deepEqual(onlyClient(lc).serverOptions, { command: "/w/.venv/bin/python", args: ["-I", "-m", "k3lsp"] });
});

test("document selector covers C files and .h headers of any language", async () => {
  const { lc } = await activated();
  assert.deepEqual(onlyClient(lc).clientOptions.documentSelector, [
    { scheme: "file", language: "c" },
    { scheme: "file", pattern: "**/*.h" },
  ]);
});

test("initializationOptions carry the server's settings and nothing extension-only", async () => {
  const { lc } = await activated({
    endpoint: "tcp://127.0.0.1:7001",
    serverKey: "/keys/server.key",
    clientKey: "/keys/client.key_secret",
    trigger: "open",
    minSeverity: "high",
    maxFileBytes: 200000,
    include: ["src/**"],
    exclude: ["third_party/**"],
    thinkingEffort: "high",
    "server.path": "/opt/k3lsp",
    "server.python": "",
    "trace.server": "verbose",
  });
  const options = onlyClient(lc).clientOptions;
  assert.deepEqual(options.initializationOptions, {
    ...DEFAULTS_SENT,
    endpoint: "tcp://127.0.0.1:7001",
    serverKey: "/keys/server.key",
    clientKey: "/keys/client.key_secret",
    trigger: "open",
    minSeverity: "high",
    maxFileBytes: 200000,
    include: ["src/**"],
    exclude: ["third_party/**"],
    thinkingEffort: "high",
  });
});

test("only the server's keys are synchronized, so `server.*` and `trace.*` never reach the server", async () => {
  const { lc } = await activated();
  assert.deepEqual(onlyClient(lc).clientOptions.synchronize, {
    configurationSection: [
      "k3lsp.trigger",
      "k3lsp.minSeverity",
      "k3lsp.maxFileBytes",
      "k3lsp.include",
      "k3lsp.exclude",
      "k3lsp.thinkingEffort",
      "k3lsp.maxWorkspaceFiles",
      "k3lsp.askAboveUnits",
      "k3lsp.kernelMacros",
      "k3lsp.witnesses",
      "k3lsp.witnessSeverity",
      "k3lsp.refute",
      "k3lsp.refuteFrom",
      "k3lsp.showRefuted",
      "k3lsp.scope",
      "k3lsp.baseRef",
      "k3lsp.kconfig",
      "k3lsp.unbuilt",
    ],
  });
});

test("workspace/configuration for section k3lsp answers with the server's keys only", async () => {
  const { lc } = await activated();
  const { configuration } = onlyClient(lc).clientOptions.middleware.workspace;
  const whole = {
    endpoint: "tcp://attacker:5555", // merged from every scope: the workspace's may be in it
    serverKey: "/repo/attacker.key",
    insecure: true,
    trigger: "manual",
    include: null,
    exclude: ["gen/**"],
    server: { path: "k3lsp", python: "" },
    trace: { server: "off" },
  };
  const params = { items: [{ section: "k3lsp" }, { section: "k3lsp.trigger" }, { section: "editor" }] };
  const next = async () => [whole, "manual", { tabSize: 4 }];
  assert.deepEqual(await configuration(params, undefined, next), [
    { trigger: "manual", exclude: ["gen/**"] },
    "manual",
    { tabSize: 4 },
  ]);
});

test("unset settings (empty string, null) are left to the server's defaults", async () => {
  const { lc } = await activated({ endpoint: "", serverKey: "  ", maxFileBytes: null, trigger: "open" });
  // The others are package.json's defaults, which VS Code reports like user values.
  const { maxFileBytes, ...sent } = DEFAULTS_SENT;
  assert.deepEqual(onlyClient(lc).clientOptions.initializationOptions, { ...sent, trigger: "open" });
  assert.equal(maxFileBytes, 1000000, "a null setting is left to the server, not sent as the default");
});

test("the four commands of package.json are registered", async () => {
  const { vscode } = await activated();
  const contributed = manifest.contributes.commands.map((c) => c.command).sort();
  assert.deepEqual(contributed, ["k3lsp.auditFile", "k3lsp.auditWorkspace", "k3lsp.restartServer", "k3lsp.showStatus"]);
  assert.deepEqual([...vscode.commands.keys()].sort(), contributed);
});

test("server commands with the extension's ids are not registered twice; the others are", async () => {
  const { lc, vscode } = await activated();
  const client = onlyClient(lc);
  const advertised = ["k3lsp.auditFile", "k3lsp.auditWorkspace", "k3lsp.status", "k3lsp.explain"];
  // The real client does this on initialize; a second registration of an id would throw.
  client.getFeature("workspace/executeCommand").register({ id: "x", registerOptions: { commands: advertised } });
  assert.ok(vscode.commands.has("k3lsp.status"));
  assert.ok(vscode.commands.has("k3lsp.explain"), "code-action commands still reach the server");
  await vscode.api.commands.executeCommand("k3lsp.explain", "fp1");
  assert.deepEqual(client.requests.at(-1).params, { command: "k3lsp.explain", arguments: ["fp1"] });
});

test("audit file sends the active document's uri", async () => {
  const { lc, vscode } = await activated();
  vscode.api.window.activeTextEditor = { document: { uri: Uri.file("/w/src/net.c") } };
  await vscode.api.commands.executeCommand("k3lsp.auditFile");
  assert.deepEqual(onlyClient(lc).requests, [
    { method: "workspace/executeCommand", params: { command: "k3lsp.auditFile", arguments: ["file:///w/src/net.c"] } },
  ]);
});

test("audit file from the explorer sends the clicked file, not the active one", async () => {
  const { lc, vscode } = await activated();
  vscode.api.window.activeTextEditor = { document: { uri: Uri.file("/w/a.c") } };
  await vscode.api.commands.executeCommand("k3lsp.auditFile", Uri.file("/w/b.h"));
  assert.deepEqual(onlyClient(lc).requests[0].params.arguments, ["file:///w/b.h"]);
});

test("audit file without a file-backed document warns and sends nothing", async () => {
  const { lc, vscode } = await activated();
  await vscode.api.commands.executeCommand("k3lsp.auditFile");
  vscode.api.window.activeTextEditor = { document: { uri: Uri.parse("untitled://Untitled-1") } };
  await vscode.api.commands.executeCommand("k3lsp.auditFile");
  assert.equal(onlyClient(lc).requests.length, 0);
  assert.deepEqual(vscode.messages.map((m) => m.level), ["warning", "warning"]);
});

test("an audit's summary or error goes to the status bar, not into another notification", async () => {
  const { lc, vscode } = await activated();
  vscode.api.window.activeTextEditor = { document: { uri: Uri.file("/w/a.c") } };
  lc.responses.set("k3lsp.auditFile", { units: 3, done: 3, findings: 1, error: null });
  await vscode.api.commands.executeCommand("k3lsp.auditFile");
  lc.responses.set("k3lsp.auditWorkspace", { files: 2, error: "k3 audit backend at tcp://h:1: not reachable" });
  await vscode.api.commands.executeCommand("k3lsp.auditWorkspace");
  assert.deepEqual(
    vscode.statusMessages.map((m) => m.text),
    ["k3: 1 finding in 3 functions", "$(warning) k3: k3 audit backend at tcp://h:1: not reachable"],
  );
  assert.deepEqual(vscode.messages, []);
});

test("audit workspace without a folder warns and sends nothing", async () => {
  const { lc, vscode } = await activated();
  vscode.api.workspace.workspaceFolders = undefined;
  await vscode.api.commands.executeCommand("k3lsp.auditWorkspace");
  assert.equal(onlyClient(lc).requests.length, 0);
  assert.deepEqual(vscode.messages.map((m) => m.text), ["k3lsp: open a folder to audit a workspace."]);
});

test("audit workspace forwards k3lsp.auditWorkspace", async () => {
  const { lc, vscode } = await activated();
  await vscode.api.commands.executeCommand("k3lsp.auditWorkspace");
  assert.deepEqual(onlyClient(lc).requests[0].params, { command: "k3lsp.auditWorkspace", arguments: [] });
});

test("show status asks k3lsp.status and shows the dict", async () => {
  const { lc, vscode } = await activated();
  const backend = { model: "tiny", ranks: 1, queued: 2, active: 0, loop_rate: 0, stop_rate: 1, stats: { loops: 0 } };
  lc.responses.set("k3lsp.status", { endpoint: "tcp://127.0.0.1:5555", backend });
  vscode.choices.push("Show Details");
  await vscode.api.commands.executeCommand("k3lsp.showStatus");
  assert.deepEqual(onlyClient(lc).requests[0].params, { command: "k3lsp.status", arguments: [] });
  const info = vscode.messages.find((m) => m.level === "info");
  assert.equal(
    info.text,
    "k3 backend: endpoint tcp://127.0.0.1:5555, model tiny, ranks 1, queue 2 (0 active), loop rate 0.0%, stop rate 100.0%",
  );
  const channel = vscode.channels[0];
  assert.match(channel.lines.join("\n"), /"loops": 0/);
  assert.equal(channel.shown, 1);
});

test("a failing server command becomes an error message", async () => {
  const { lc, vscode } = await activated();
  lc.responses.set("k3lsp.status", new Error("backend timed out"));
  await vscode.api.commands.executeCommand("k3lsp.showStatus");
  assert.deepEqual(
    vscode.messages.map((m) => [m.level, m.text]),
    [["error", "k3lsp: k3lsp.status failed: backend timed out"]],
  );
});

test("a command while the server is down offers a restart instead of sending", async () => {
  const { lc, vscode } = await activated();
  onlyClient(lc).setState(State.Stopped);
  vscode.choices.push("Restart Server");
  await vscode.api.commands.executeCommand("k3lsp.auditWorkspace");
  assert.equal(lc.clients[0].requests.length, 0);
  assert.match(vscode.messages[0].text, /not running/);
  assert.equal(lc.clients.length, 2, "the offered restart builds a new client");
  assert.ok(lc.clients[1].isRunning());
});

test("restart disposes the client and starts a new one with the current settings", async () => {
  const { lc, vscode } = await activated({ "server.path": "k3lsp" });
  vscode.settings["server.path"] = "/opt/k3lsp/bin/k3lsp";
  vscode.settings.trigger = "manual";
  await vscode.api.commands.executeCommand("k3lsp.restartServer");
  assert.equal(lc.clients.length, 2);
  assert.equal(lc.clients[0].disposed, 1);
  assert.equal(lc.clients[1].serverOptions.command, "/opt/k3lsp/bin/k3lsp");
  assert.deepEqual(lc.clients[1].clientOptions.initializationOptions, { ...DEFAULTS_SENT, trigger: "manual" });
  assert.ok(lc.clients[1].isRunning());
});

test("changing k3lsp.server.* restarts the server; other keys only sync", async () => {
  const { lc, vscode } = await activated();
  vscode.changeSettings({ trigger: "open" });
  vscode.changeSettings({ "server.python": "/usr/bin/python3" });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(lc.clients.length, 2);
  assert.deepEqual(lc.clients[1].serverOptions, { command: "/usr/bin/python3", args: ["-I", "-m", "k3lsp"] });
});

test("changing the endpoint or a key restarts the server with it; a workspace's value changes nothing", async () => {
  const { lc, vscode } = await activated({ endpoint: "ipc:///run/user/1000/k3lsp/daemon.sock" });
  vscode.changeSettings({ endpoint: "tcp://mac:5555", serverKey: "/keys/server.key" });
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(lc.clients.length, 2);
  assert.deepEqual(lc.clients[1].clientOptions.initializationOptions, {
    ...DEFAULTS_SENT,
    endpoint: "tcp://mac:5555",
    serverKey: "/keys/server.key",
  });
  vscode.changeSettings({ endpoint: "tcp://attacker:5555", "server.path": "/repo/evil" }, vscode.workspaceSettings);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(lc.clients.length, 2, "no restart: nothing the server was started with changed");
});

test("a workspace's .vscode/settings.json chooses no program, daemon, key or insecurity", async () => {
  const loaded = loadExtension({ clientKey: "/home/me/.config/k3lsp/keys/me.key_secret" });
  Object.assign(loaded.vscode.workspaceSettings, {
    "server.path": "/repo/bin/evil",
    "server.python": "/repo/.venv/bin/python",
    endpoint: "tcp://attacker:5555",
    serverKey: "/repo/attacker.key",
    clientKey: "/repo/me.key_secret",
    insecure: true,
    minSeverity: "high", // a project's own choice: taken
  });
  await loaded.extension.activate(loaded.context);
  try {
    const client = onlyClient(loaded.lc);
    assert.deepEqual(client.serverOptions, { command: "k3lsp", args: [] });
    assert.deepEqual(client.clientOptions.initializationOptions, {
      ...DEFAULTS_SENT,
      clientKey: "/home/me/.config/k3lsp/keys/me.key_secret",
      minSeverity: "high",
    });
  } finally {
    await loaded.extension.deactivate();
  }
});

test("package.json: those settings are machine-scoped and restricted in untrusted workspaces, where audits work", () => {
  const props = manifest.contributes.configuration.properties;
  const ids = config.USER_ONLY.map((key) => `k3lsp.${key}`);
  for (const id of ids) {
    assert.equal(props[id].scope, "machine", id);
  }
  const others = Object.keys(props).filter((id) => !ids.includes(id));
  assert.ok(others.every((id) => props[id].scope === undefined), others);
  const untrusted = manifest.capabilities.untrustedWorkspaces;
  assert.equal(untrusted.supported, "limited");
  assert.deepEqual(untrusted.restrictedConfigurations, ids);
});

test("a server that cannot start: the client library's message only, the reason in the status bar", async () => {
  const loaded = loadExtension({ "server.path": "/nope/k3lsp" });
  loaded.lc.startError = new Error("spawn /nope/k3lsp ENOENT");
  await loaded.extension.activate(loaded.context);
  assert.deepEqual(loaded.vscode.messages, [], "the client library already showed one; a second is noise");
  const item = loaded.vscode.statusItems[0];
  assert.equal(item.text, "$(error) k3: server stopped");
  assert.match(item.tooltip, /could not start the language server "\/nope\/k3lsp": spawn \/nope\/k3lsp ENOENT/);
  assert.match(item.tooltip, /k3lsp\.server\.path/);
  await loaded.extension.deactivate();
});

test("after a failed start, settings that change without an event still start the server", async () => {
  const loaded = loadExtension({ "server.path": "/nope/k3lsp" });
  loaded.lc.startError = new Error("spawn /nope/k3lsp ENOENT");
  await loaded.extension.activate(loaded.context);
  loaded.lc.startError = undefined;
  loaded.vscode.settings["server.path"] = "/opt/k3lsp"; // e.g. settings.json rewritten during the first start
  try {
    await eventually("a new client", () => loaded.lc.clients.length, (n) => n === 2, 10000);
    await eventually("it runs", () => loaded.lc.clients[1].isRunning(), Boolean);
    assert.equal(loaded.lc.clients[1].serverOptions.command, "/opt/k3lsp");
  } finally {
    await loaded.extension.deactivate();
  }
});

test("a C file saved while no server ran is saved again to the server once one runs", async () => {
  const loaded = loadExtension({ "server.path": "/nope/k3lsp" });
  loaded.lc.startError = new Error("spawn /nope/k3lsp ENOENT");
  await loaded.extension.activate(loaded.context);
  const file = (name, languageId) => ({ uri: Uri.file(`/w/${name}`), fileName: `/w/${name}`, languageId });
  const [source, header, other] = [file("a.c", "c"), file("a.h", "cpp"), file("notes.md", "markdown")];
  loaded.vscode.api.workspace.textDocuments.push(source, header, other);
  [source, header, other].forEach((document) => loaded.vscode.save(document));
  loaded.lc.startError = undefined;
  loaded.vscode.changeSettings({ "server.path": "/opt/k3lsp" });
  try {
    await eventually("the saves", () => loaded.lc.clients[1]?.notifications ?? [], (n) => n.length === 2);
    assert.deepEqual(loaded.lc.clients[1].notifications, [
      { method: "textDocument/didSave", params: { textDocument: { uri: "file:///w/a.c" } } },
      { method: "textDocument/didSave", params: { textDocument: { uri: "file:///w/a.h" } } },
    ]);
  } finally {
    await loaded.extension.deactivate();
  }
});

test("the status bar follows k3lsp/status notifications and opens the status on click", async () => {
  const { lc, vscode } = await activated();
  const item = vscode.statusItems[0];
  assert.ok(item.visible);
  assert.equal(item.command, "k3lsp.showStatus");
  const client = onlyClient(lc);
  client.notify("k3lsp/status", { state: "connected", queued: 2, running: 1 });
  assert.equal(item.text, "$(sync~spin) k3: auditing 3");
  assert.equal(item.backgroundColor, undefined);
  client.notify("k3lsp/status", { state: "down", queued: 0, running: 0, message: "no pong for 10 s" });
  assert.equal(item.text, "$(error) k3: backend unreachable");
  assert.match(item.tooltip, /no pong for 10 s/);
  assert.equal(item.backgroundColor.id, "statusBarItem.errorBackground");
  client.notify("k3lsp/status", { state: "sleeping", queued: 0, running: 0 });
  assert.equal(item.text, "$(warning) k3: bad status");
  assert.match(item.tooltip, /unknown state "sleeping"/);
});

test("before any backend state the status bar says the server runs, not connected yet", async () => {
  const { vscode } = await activated();
  assert.equal(vscode.statusItems[0].text, "$(circle-outline) k3: not connected");
  assert.match(vscode.statusItems[0].tooltip, /has not contacted the audit backend yet/);
});

test("after the client restarts a crashed server, the old backend state is not shown", async () => {
  const { lc, vscode } = await activated();
  const client = onlyClient(lc);
  client.notify("k3lsp/status", { state: "connected", queued: 0, running: 0 });
  assert.equal(vscode.statusItems[0].text, "$(shield) k3: idle");
  client.setState(State.Starting);
  client.setState(State.Running);
  assert.equal(vscode.statusItems[0].text, "$(circle-outline) k3: not connected");
});

test("the status bar shows when the server process stops", async () => {
  const { lc, vscode } = await activated();
  onlyClient(lc).setState(State.Stopped);
  assert.equal(vscode.statusItems[0].text, "$(error) k3: server stopped");
});

test("deactivate stops the client", async () => {
  const { extension, lc } = await activated();
  await extension.deactivate();
  assert.equal(onlyClient(lc).disposed, 1);
  assert.ok(!onlyClient(lc).isRunning());
});

test("deactivate before activation is harmless", async () => {
  const { extension } = loadExtension();
  await extension.deactivate();
});
