"use strict";
/** The one-line outcome of the server's audit commands. */
const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { OUT } = require("./support/fakes");

const { auditOutcome } = require(path.join(OUT, "results.js"));

test("file audits summarise findings and functions", () => {
  assert.deepEqual(auditOutcome({ units: 4, done: 4, findings: 2, error: null }), {
    summary: "k3: 2 findings in 4 functions",
  });
  assert.deepEqual(auditOutcome({ units: 1, done: 1, findings: 0 }), { summary: "k3: 0 findings in 1 function" });
});

test("workspace audits count files", () => {
  assert.deepEqual(auditOutcome({ files: 1 }), { summary: "k3: audited 1 file" });
});

test("an error wins over counts; an empty error is none", () => {
  assert.deepEqual(auditOutcome({ files: 0, error: "no workspace folder is open" }), {
    error: "no workspace folder is open",
  });
  assert.deepEqual(auditOutcome({ files: 3, error: "" }), { summary: "k3: audited 3 files" });
});

test("superseded audits and unknown answers say nothing", () => {
  assert.deepEqual(auditOutcome({ units: 0, cancelled: true }), {});
  assert.deepEqual(auditOutcome(null), {});
  assert.deepEqual(auditOutcome("done"), {});
  assert.deepEqual(auditOutcome({ other: 1 }), {});
});
