"use strict";
/**
 * The extension, the real vscode-languageclient and the real `k3lsp` server of this repository
 * (from the project's .venv, or $K3LSP_TEST_SERVER), with the backend endpoint pointing at a free
 * port where nothing listens. Checks the contract between the extension and the server: settings
 * accepted without errors, commands routed, backend state on the status bar.
 */
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const { loadExtension } = require("./support/fakes");
const { eventually } = require("./support/wait");

const SERVER = process.env.K3LSP_TEST_SERVER || path.resolve(__dirname, "..", "..", "..", ".venv", "bin", "k3lsp");
const skip = fs.existsSync(SERVER) ? false : `no k3lsp server at ${SERVER} (run uv sync, or set K3LSP_TEST_SERVER)`;

/** A port nobody listens on: bound by the OS, then released. */
async function deadPort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test("real server: settings accepted, audit with the backend down, status", { skip, timeout: 90000 }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "k3lsp-vscode-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  process.env.XDG_CACHE_HOME = path.join(dir, "cache"); // the server's result cache stays in the test dir
  const source = path.join(dir, "drv.c");
  fs.writeFileSync(source, "#include <string.h>\nvoid copy(char *d, const char *s) {\n  strcpy(d, s);\n}\n");
  const endpoint = `tcp://127.0.0.1:${await deadPort()}`;
  const { extension, context, vscode } = loadExtension(
    { "server.path": SERVER, endpoint, insecure: true, trigger: "manual", minSeverity: "high", exclude: ["gen/**"] },
    { client: "real" },
  );
  vscode.api.workspace.workspaceFolders = [{ uri: vscode.api.Uri.file(dir), name: "w", index: 0 }];
  const item = () => vscode.statusItems[0];
  const problems = () => vscode.messages.filter((m) => m.level === "error");
  try {
    await extension.activate(context);
    // The server says so itself once it runs (a k3lsp/status notification), naming the configured endpoint.
    await eventually("the server's state", () => item().tooltip, (tip) => tip.includes(`not connected yet to ${endpoint}`));
    assert.equal(item().text, "$(circle-outline) k3: not connected");
    // The server reports bad or unknown settings with window/showMessage; wait for its config round trip.
    await eventually("k3lsp.status", () => vscode.commands.has("k3lsp.status"), Boolean);
    await vscode.api.commands.executeCommand("k3lsp.showStatus");
    assert.deepEqual(problems(), [], "the server accepted every setting the extension sent");
    assert.match(vscode.messages.at(-1).text, /^k3 backend at endpoint tcp:\/\/127\.0\.0\.1:\d+ is unreachable: /);
    const details = JSON.parse(vscode.channels[0].lines.find((l) => l.startsWith("k3 backend status:")).slice(19));
    assert.equal(details.cache.path, path.join(dir, "cache", "k3lsp", "results.sqlite3"));

    await vscode.api.commands.executeCommand("k3lsp.auditFile", vscode.api.Uri.file(source));
    await eventually("the backend-down state", () => item().text, (text) => text === "$(error) k3: backend unreachable");
    assert.match(item().tooltip, new RegExp(endpoint.replace(/[.:/]/g, "\\$&")), "the configured endpoint is used");
    // A server that keeps the backend client it built before reading the settings dials the default.
    assert.doesNotMatch(item().tooltip, /:5555\b/, "the server dialled the default endpoint, not k3lsp.endpoint");
    // The audit's own answer carries the failure, which the command shows in the status bar.
    await eventually("the audit's outcome", () => vscode.statusMessages.map((m) => m.text), (texts) =>
      texts.some((t) => t.startsWith("$(warning) k3: ") && t.includes(endpoint)),
    );
  } finally {
    await extension.deactivate();
  }
  assert.equal(item().text, "$(error) k3: server stopped");
});

const PYTHON = path.join(path.dirname(SERVER), "python");

test("real server through k3lsp.server.python (`python -I -m k3lsp`), started in a hostile workspace", { skip, timeout: 60000 }, async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "k3lsp-vscode-"));
  const cwd = process.cwd();
  t.after(() => {
    process.chdir(cwd);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  process.env.XDG_CACHE_HOME = path.join(dir, "cache");
  // The audited repository holds a `k3lsp` package; the server process starts in it.
  const marker = path.join(dir, "marker");
  fs.mkdirSync(path.join(dir, "k3lsp"));
  fs.writeFileSync(path.join(dir, "k3lsp", "__init__.py"), `open(${JSON.stringify(marker)}, "w").write("ran")\n`);
  process.chdir(dir);
  const { extension, context, vscode } = loadExtension(
    { "server.python": PYTHON, endpoint: `tcp://127.0.0.1:${await deadPort()}`, insecure: true },
    { client: "real" },
  );
  vscode.api.workspace.workspaceFolders = [{ uri: vscode.api.Uri.file(dir), name: "w", index: 0 }];
  try {
    await extension.activate(context);
    const settled = ["$(circle-outline) k3: not connected", "$(error) k3: server stopped"];
    const text = await eventually("the server to start or stop", () => vscode.statusItems[0].text, (t) =>
      settled.includes(t),
    );
    assert.equal(text, settled[0], `python -I -m k3lsp did not start:\n${vscode.channels[0].lines.slice(-5).join("\n")}`);
    await vscode.api.commands.executeCommand("k3lsp.showStatus");
    assert.deepEqual(vscode.messages.filter((m) => m.level === "error"), []);
    assert.match(vscode.messages.at(-1).text, /^k3 backend at endpoint .* is unreachable: /);
  } finally {
    await extension.deactivate();
  }
  assert.equal(fs.existsSync(marker), false, "the server imported the workspace's k3lsp package");
});
