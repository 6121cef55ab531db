const test = require("node:test");
const assert = require("node:assert");
const { add } = require("..");

test("adds", () => assert.strictEqual(add(2, 2), 4));
test("refuses text", () => assert.throws(() => add('a', 1), TypeError));
