"use strict";
/** The settings contributed in package.json match what config.ts reads and sends. */
const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { OUT } = require("./support/fakes");

const config = require(path.join(OUT, "config.js"));
const manifest = require("../package.json");

const EXTENSION_ONLY = ["server.path", "server.python", "trace.server"];

test("package.json contributes exactly the server keys plus the extension-only keys", () => {
  const contributed = Object.keys(manifest.contributes.configuration.properties).map((k) =>
    k.replace(/^k3lsp\./, ""),
  );
  assert.deepEqual(contributed.sort(), [...config.SERVER_KEYS, ...EXTENSION_ONLY].sort());
});

test("contributed defaults start the server as documented", () => {
  const props = manifest.contributes.configuration.properties;
  const defaults = { get: (key) => props[`k3lsp.${key}`].default };
  assert.deepEqual(config.serverCommand(defaults), { command: "k3lsp", args: [] });
  // "" and [] defaults mean "the server's default" and are not sent; the others are the server's own defaults.
  const sent = config.serverSettings(defaults);
  for (const blank of ["endpoint", "serverKey", "clientKey", "baseRef", "witnesses", "kconfig"]) {
    assert.equal(sent[blank], undefined, blank);
  }
  assert.equal(sent.trigger, "save");
  assert.deepEqual(sent.include, ["**/*.c", "**/*.h"]);
});

test("every server key of the manifest is sent when set, none dropped (the keys come from package.json)", () => {
  const props = manifest.contributes.configuration.properties;
  const set = {};
  for (const key of config.SERVER_KEYS) {
    set[key] = props[`k3lsp.${key}`].enum?.[1] ?? `value of ${key}`;
  }
  const view = { get: (key) => set[key], inspect: (key) => ({ globalValue: set[key] }) };
  assert.deepEqual(config.serverSettings(view), set);
  for (const key of ["witnesses", "refute", "refuteFrom", "showRefuted", "scope", "baseRef", "kernelMacros",
    "witnessSeverity", "maxWorkspaceFiles", "kconfig", "unbuilt"]) {
    assert.ok(config.SYNCHRONIZED_SETTINGS.includes(`k3lsp.${key}`), key);
  }
});

test("serverSection leaves non-objects alone", () => {
  assert.equal(config.serverSection(null), null);
  assert.equal(config.serverSection("x"), "x");
  assert.deepEqual(config.serverSection([1]), [1]);
});

test("enums match the server's values", () => {
  const props = manifest.contributes.configuration.properties;
  assert.deepEqual(props["k3lsp.trigger"].enum, ["save", "open", "manual"]);
  assert.deepEqual(props["k3lsp.minSeverity"].enum, ["critical", "high", "medium", "low", "info"]);
  assert.deepEqual(props["k3lsp.thinkingEffort"].enum, ["auto", "off", "low", "high", "max"]);
});

test("a blank server path falls back to k3lsp", () => {
  assert.deepEqual(config.serverCommand({ get: (key) => (key === "server.path" ? "  " : undefined) }), {
    command: "k3lsp",
    args: [],
  });
});

test("an endpoint list is sent as a list; an empty one, like an empty string, is left to the server", () => {
  const list = ["tcp://pair-a:5555", "tcp://pair-b:5555"];
  const view = (endpoint) => ({ get: () => undefined, inspect: (key) => (key === "endpoint" ? { globalValue: endpoint } : undefined) });
  assert.deepEqual(config.serverSettings(view(list)), { endpoint: list });
  assert.deepEqual(config.serverSettings(view([])), {});
  assert.deepEqual(config.serverSettings(view("")), {});
});

test("the settings that choose a program, a daemon, keys or insecurity come from the user's settings only", () => {
  const user = { "server.python": "/home/me/venv/bin/python", endpoint: "tcp://mac:5555", minSeverity: "low" };
  const workspace = {
    "server.python": "/repo/.venv/bin/python",
    "server.path": "/repo/k3lsp",
    endpoint: "tcp://attacker:5555",
    serverKey: "/repo/a.key",
    clientKey: "/repo/b.key_secret",
    insecure: true,
    minSeverity: "high",
  };
  const view = {
    get: (key) => workspace[key] ?? user[key], // what VS Code's get() merges: the workspace wins
    inspect: (key) => ({ globalValue: user[key], workspaceValue: workspace[key] }),
  };
  assert.deepEqual(config.serverCommand(view), { command: "/home/me/venv/bin/python", args: ["-I", "-m", "k3lsp"] });
  assert.deepEqual(config.serverSettings(view), { endpoint: "tcp://mac:5555", minSeverity: "high" });
  // A plain section (workspace/configuration's answer) says nothing of scopes: those keys are left out.
  assert.deepEqual(config.serverSection({ ...user, ...workspace }), { minSeverity: "high" });
  assert.deepEqual(
    config.SYNCHRONIZED_SETTINGS.filter((id) => config.USER_ONLY.includes(id.slice(6))),
    [],
    "a change of those restarts the server",
  );
});
