// Checks the outputs of the grammar engine's generator test against references nobody here wrote: ajv (JSON
// Schema 2020-12, formats by ajv-formats in full mode) for schemas, JSON.parse for JSON grammars, and the
// JavaScript RegExp engine (unicode mode, anchored) for regular expressions and GBNF cases given a regex twin.
//
// usage: node validate.mjs CASES.jsonl
// Each line: {"id", "kind": "json_schema"|"json_object"|"regex"|"json"|"json_array"|"js_regex", "spec",
//             "check" (js_regex: the pattern), "output", "expect_valid" (false: a deliberately wrong case that
//             must be caught)}.
// Prints {"checked": N, "failures": [...]} and exits 1 when any case disagrees with expect_valid.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv, { mode: "full" });

function check(c) {
  switch (c.kind) {
    case "json_schema": {
      let value;
      try { value = JSON.parse(c.output); } catch (e) { return `not JSON: ${e.message}`; }
      let validate;
      try { validate = ajv.compile(JSON.parse(c.spec)); } catch (e) { return `ajv cannot compile the schema: ${e.message}`; }
      return validate(value) ? null : ajv.errorsText(validate.errors);
    }
    case "json_object": {
      let value;
      try { value = JSON.parse(c.output); } catch (e) { return `not JSON: ${e.message}`; }
      return value !== null && typeof value === "object" && !Array.isArray(value) ? null : "not a JSON object";
    }
    case "json":
    case "json_array": {
      let value;
      try { value = JSON.parse(c.output); } catch (e) { return `not JSON: ${e.message}`; }
      if (c.kind === "json_array" && !Array.isArray(value)) return "not a JSON array";
      return null;
    }
    case "regex":
    case "js_regex": {
      const pattern = c.kind === "regex" ? c.spec : c.check;
      let re;
      try { re = new RegExp(`^(?:${pattern})$`, "u"); } catch (e) { return `RegExp refuses the pattern: ${e.message}`; }
      return re.test(c.output) ? null : "does not match";
    }
    default:
      return `unknown kind ${c.kind}`;
  }
}

const lines = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.length > 0);
const failures = [];
for (const line of lines) {
  const c = JSON.parse(line);
  const problem = check(c);
  const valid = problem === null;
  const expect = c.expect_valid !== false;
  if (valid !== expect) {
    failures.push({ id: c.id, kind: c.kind, problem: expect ? problem : "a wrong output was accepted",
                    spec: c.spec.slice(0, 400), output: c.output.slice(0, 400) });
  }
}
console.log(JSON.stringify({ checked: lines.length, failures }, null, 1));
process.exit(failures.length === 0 ? 0 : 1);
