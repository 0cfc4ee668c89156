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

test("connected: idle, queued, running", () => {
  assert.equal(view({ state: "connected", queued: 0, running: 0 }).text, "$(shield) k3: idle");
  assert.equal(view({ state: "connected", queued: 2, running: 0 }).text, "$(shield) k3: 2 queued");
  assert.equal(view({ state: "connected", queued: 3, running: 1 }).text, "$(shield) k3: 1 running, 3 queued");
  assert.equal(view({ state: "connected", queued: 3, running: 1 }).error, false);
});

test("connecting shows pending work", () => {
  const v = view({ state: "connecting", queued: 4, running: 0 });
  assert.equal(v.text, "$(sync~spin) k3: connecting (4 queued)");
  assert.equal(v.error, false);
});

test("down and unauthorized are errors and carry the server's message", () => {
  const down = view({ state: "down", queued: 1, running: 0, message: "tcp://10.0.0.2:5555 unreachable" });
  assert.equal(down.text, "$(error) k3: backend down");
  assert.equal(down.error, true);
  assert.match(down.tooltip, /tcp:\/\/10\.0\.0\.2:5555 unreachable/);
  const refused = view({ state: "unauthorized", queued: 0, running: 0 });
  assert.equal(refused.text, "$(lock) k3: key refused");
  assert.equal(refused.error, true);
  assert.match(refused.tooltip, /k3lsp\.clientKey/);
});

test("every tooltip says what a click does", () => {
  for (const state of status.BACKEND_STATES) {
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

test("status summary lists scalar fields and is bounded", () => {
  assert.equal(status.summarizeStatus({ a: 1, b: "x", c: { d: 2 } }), "k3 backend status: a: 1, b: x");
  assert.equal(status.summarizeStatus("weird"), 'k3 backend status: "weird"');
  assert.ok(status.summarizeStatus({ long: "y".repeat(1000) }).length <= 300);
});
