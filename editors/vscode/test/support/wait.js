"use strict";
const assert = require("node:assert/strict");

/** Polls until `predicate(probe())` holds; fails after `ms` with the last value, never hangs. */
async function eventually(what, probe, predicate, ms = 20000) {
  const deadline = Date.now() + ms;
  let value = probe();
  while (!predicate(value)) {
    if (Date.now() > deadline) {
      assert.fail(`timed out waiting for ${what}; last: ${JSON.stringify(value)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 25));
    value = probe();
  }
  return value;
}

module.exports = { eventually };
