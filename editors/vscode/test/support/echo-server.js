#!/usr/bin/env node
"use strict";
/**
 * A minimal stdio language server standing in for `k3lsp` in the real-client test: it advertises
 * the same commands, pushes a `k3lsp/status`, asks for the `k3lsp` configuration section and
 * writes every message it receives, one JSON object a line, to $K3LSP_ECHO_LOG.
 */
const fs = require("node:fs");
const rpc = require("vscode-jsonrpc/node");

const log = process.env.K3LSP_ECHO_LOG;
function record(method, params) {
  fs.appendFileSync(log, `${JSON.stringify({ method, params })}\n`);
}

const connection = rpc.createMessageConnection(
  new rpc.StreamMessageReader(process.stdin),
  new rpc.StreamMessageWriter(process.stdout),
);

connection.onRequest("initialize", (params) => {
  record("initialize", { argv: process.argv.slice(2), initializationOptions: params.initializationOptions });
  return {
    capabilities: {
      textDocumentSync: 1,
      executeCommandProvider: {
        commands: ["k3lsp.auditFile", "k3lsp.auditWorkspace", "k3lsp.status", "k3lsp.explain"],
      },
    },
  };
});

connection.onNotification("initialized", async () => {
  record("initialized", {});
  const configuration = await connection.sendRequest("workspace/configuration", { items: [{ section: "k3lsp" }] });
  record("configuration-result", configuration);
  await connection.sendNotification("k3lsp/status", { state: "connected", queued: 2, running: 1 });
});

connection.onNotification("workspace/didChangeConfiguration", (params) => record("didChangeConfiguration", params));

connection.onRequest("workspace/executeCommand", (params) => {
  record("executeCommand", params);
  const backend = { model: "echo", ranks: 1, queued: 2, active: 1, loop_rate: 0, stop_rate: 1 };
  return params.command === "k3lsp.status" ? { endpoint: "tcp://127.0.0.1:5555", backend } : null;
});

connection.onRequest("shutdown", () => {
  record("shutdown", {});
  return null;
});
connection.onNotification("exit", () => process.exit(0));
connection.listen();
