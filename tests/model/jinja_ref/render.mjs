// Renders chat-template cases with @huggingface/jinja, the reference Tessera's Jinja engine is compared
// with (tests/model/jinja_templates_test.cc). Input: a JSON file [{id, template, context}] where template is
// a path; output: a JSON file [{id, ok, text | error}]. strftime_now sees a fixed instant (the caller sets
// TZ=UTC and passes the same instant to Tessera), so dated templates (Llama 3.x) compare byte for byte.
import { readFileSync, writeFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const [, , casesPath, outPath, fixedMs] = process.argv;
const fixed = Number(fixedMs);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(fixed);
    else super(...args);
  }
  static now() {
    return fixed;
  }
};

const cases = JSON.parse(readFileSync(casesPath, "utf8"));
const compiled = new Map();
const out = [];
for (const c of cases) {
  let t = compiled.get(c.template);
  if (t === undefined) {
    try {
      t = new Template(readFileSync(c.template, "utf8"));
    } catch (e) {
      t = { error: `parse: ${e.message}` };
    }
    compiled.set(c.template, t);
  }
  if (t.error !== undefined) {
    out.push({ id: c.id, ok: false, error: t.error });
    continue;
  }
  try {
    out.push({ id: c.id, ok: true, text: t.render(c.context) });
  } catch (e) {
    out.push({ id: c.id, ok: false, error: String(e.message) });
  }
}
writeFileSync(outPath, JSON.stringify(out));
