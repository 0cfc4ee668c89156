"use strict";
/** Status bar text for every backend state, and validation of the notification. */
const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { OUT } = require("./support/fakes");

const status = require(path.join(OUT, "status.js"));

function view(params) {
  return status.statusView(status.parseStatus(params));
}

test("connected: idle, or auditing the running and queued units", () => {
  assert.equal(view({ state: "connected", queued: 0, running: 0 }).text, "$(shield) k3: idle");
  assert.equal(view({ state: "connected", queued: 2, running: 0 }).text, "$(sync~spin) k3: auditing 2");
  const busy = view({ state: "connected", queued: 3, running: 1 });
  assert.equal(busy.text, "$(sync~spin) k3: auditing 4");
  assert.match(busy.tooltip, /1 running, 3 queued/);
  assert.equal(busy.error, false);
});

test("not connected yet and connecting say so, with the server's reason", () => {
  const idle = view({ state: "disconnected", queued: 0, running: 0, message: "not connected yet to tcp://h:1" });
  assert.equal(idle.text, "$(circle-outline) k3: not connected");
  assert.match(idle.tooltip, /not connected yet to tcp:\/\/h:1/);
  const v = view({ state: "connecting", queued: 4, running: 0 });
  assert.equal(v.text, "$(sync~spin) k3: connecting");
  assert.match(v.tooltip, /4 queued/);
  assert.equal(v.error, false);
});

test("loading shows how much of the model the backend has read; a bad percent is refused", () => {
  const v = view({ state: "loading", queued: 1, running: 0, percent: 42, message: "backend loading (42 %)" });
  assert.equal(v.text, "$(sync~spin) k3: backend loading (42 %)");
  assert.equal(v.error, false);
  assert.match(v.tooltip, /loading its model; audits wait for it \(1 queued\)/);
  assert.equal(view({ state: "loading", queued: 0, running: 0 }).text, "$(sync~spin) k3: backend loading");
  assert.throws(() => status.parseStatus({ state: "loading", queued: 0, running: 0, percent: 101 }), /percent/);
  assert.throws(() => status.parseStatus({ state: "loading", queued: 0, running: 0, percent: "42" }), /percent/);
  const line = status.summarizeStatus({
    endpoint: "ipc:///run/k3.sock",
    backend: { state: "loading", model: "tiny", loading: { percent: 42, stage: "weights", seconds: 9.5 } },
  });
  assert.equal(line, "k3 backend: endpoint ipc:///run/k3.sock, model tiny, loading (42 %, weights, 9.5 s so far)");
});

test("down and unauthorized are errors and carry the server's message", () => {
  const down = view({ state: "down", queued: 1, running: 0, message: "tcp://10.0.0.2:5555 unreachable" });
  assert.equal(down.text, "$(error) k3: backend unreachable");
  assert.equal(down.error, true);
  assert.match(down.tooltip, /tcp:\/\/10\.0\.0\.2:5555 unreachable/);
  const refused = view({ state: "unauthorized", queued: 0, running: 0 });
  assert.equal(refused.text, "$(lock) k3: key refused");
  assert.equal(refused.error, true);
  assert.match(refused.tooltip, /k3lsp\.clientKey/);
});

test("every tooltip says what a click does", () => {
  for (const state of status.DAEMON_STATES) {
    assert.match(view({ state, queued: 0, running: 0 }).tooltip, /Click for the backend status/);
  }
});

test("malformed notifications are rejected with the reason", () => {
  assert.throws(() => status.parseStatus(null), /expected an object/);
  assert.throws(() => status.parseStatus({ state: "up", queued: 0, running: 0 }), /unknown state "up"/);
  assert.throws(() => status.parseStatus({ state: "down", queued: -1, running: 0 }), /must be counts/);
  assert.throws(() => status.parseStatus({ state: "down", queued: 1.5, running: 0 }), /must be counts/);
  assert.throws(() => status.parseStatus({ state: "down", queued: 0 }), /must be counts/);
  assert.throws(() => status.parseStatus({ state: "down", queued: 0, running: 0, message: 3 }), /message/);
});

test("status summary: endpoint, model, ranks, queue, loop and stop rates, or why the backend is unreachable", () => {
  const backend = { model: "k3-451e", ranks: 2, queued: 3, active: 1, loop_rate: 0.02, stop_rate: 0.975 };
  assert.equal(
    status.summarizeStatus({ endpoint: "tcp://mac:5555", backend }),
    "k3 backend: endpoint tcp://mac:5555, model k3-451e, ranks 2, queue 3 (1 active), loop rate 2.0%, stop rate 97.5%",
  );
  assert.equal(
    status.summarizeStatus({ endpoint: "tcp://mac:5555", backend: null, error: "not reachable" }),
    "k3 backend at endpoint tcp://mac:5555 is unreachable: not reachable",
  );
  assert.equal(status.summarizeStatus("weird"), 'k3 backend status: "weird"');
  assert.ok(status.summarizeStatus({ endpoint: "e", backend: { model: "y".repeat(1000) } }).length <= 400);
});

test("a daemon's words form no notification link", () => {
  const model = "[Apply the verified patch](command:workbench.extensions.installExtension?%5B%22x%22%5D)";
  const line = status.summarizeStatus({ endpoint: "[e](command:x)", backend: { model, ranks: 1 } });
  assert.doesNotMatch(line, /\]\(/);
  assert.match(line, /model \[Apply the verified patch\] \(command:workbench/);
  assert.equal(status.plainText("[a]((b)](c)"), "[a] ((b)] (c)");
});

test("the tooltip says how many findings are silenced, and by what", () => {
  const v = view({ state: "connected", queued: 0, running: 0, suppressed: 2, baselined: 1 });
  assert.match(v.tooltip, /3 findings silenced: 2 by k3-audit: ignore comments, 1 by the baseline\.\nClick/);
  assert.doesNotMatch(view({ state: "connected", queued: 0, running: 0, suppressed: 0 }).tooltip, /silenced/);
});
