// The Jinja engine on its own: the constructs chat templates use, with outputs worked out by hand from
// Jinja's (and @huggingface/jinja's) documented semantics, and the failure modes a bad or hostile template
// must hit: an error naming the line, never a crash or a hang.
#include "model/jinja/template.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace tessera::model::jinja {
namespace {

std::string render(const std::string& src, const std::string& ctx_json = "{}", RenderOptions o = {}) {
  auto t = Template::parse(src);
  if (!t.ok()) return "PARSE ERROR: " + t.status().message();
  auto ctx = value_from_json(ctx_json);
  if (!ctx.ok()) return "CONTEXT ERROR";
  auto r = t->render(ctx->obj(), o);
  if (!r.ok()) return "ERROR: " + r.status().message();
  return *r;
}

TEST(Jinja, ExpressionsAndPrinting) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ -7 % 3 }}"), "7 3 3.5 1024 -1");
  EXPECT_EQ(render("{{ 1.0 }} {{ 1.0 ~ '' }} {{ true }} {{ none }}|{{ undefined_name }}|"), "1.0 1 true ||");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ [1, 'x'] }}"), "a11,x");
  EXPECT_EQ(render("{{ [1, 'a', none, {'k': true}] }}"), "[1, \"a\", null, {\"k\": true}]");
  EXPECT_EQ(render("{{ 'yes' if x else 'no' }} {{ x is defined }} {{ y is not none }}", R"({"x": 0, "y": 1})"),
            "no true true");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}"),
            "true true true true");
  EXPECT_EQ(render("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ [1,2,3,4][-2:] }} {{ 'héllo'[1] }}"),
            "bcd fedcba [3, 4] é");
}

TEST(Jinja, StringMethodsAndFilters) {
  EXPECT_EQ(render("{{ '  hi  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'x'.upper() }}"),
            "hi|[\"a\", \"b\", \"\", \"c\"]|[\"a\", \"b\", \"c\"]|X");
  EXPECT_EQ(render("{{ 'hello world'.title() }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}"),
            "Hello World true true");
  EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc' | length }} {{ [3, 1, 2] | sort | join('-') }}"),
            "bba 3 1-2-3");
  EXPECT_EQ(render("{{ x | tojson }}", R"({"x": {"b": [1, 2.5, "é\n"], "a": null}})"),
            "{\"b\": [1, 2.5, \"é\\n\"], \"a\": null}");
  EXPECT_EQ(render("{{ x | tojson(indent=2) }}", R"({"x": {"a": [1]}})"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ 'é' | tojson(ensure_ascii=true) }}"), "\"\\u00e9\"");
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | join(',') }}",
                   R"({"ms": [{"role": "user", "c": "a"}, {"role": "bot", "c": "b"}, {"role": "user", "c": "d"}]})"),
            "a,d");
  EXPECT_EQ(render("{{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ 'line1\nline2' | indent(2) }}"),
            "dflt e line1\n  line2");
  EXPECT_EQ(render("{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"b": 2, "a": 1}})"),
            "a=1;b=2;");
}

TEST(Jinja, LoopsConditionalsAndScopes) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}/{{ loop.length }}{% if loop.first %}F{% endif %}"
                   "{% if not loop.last %},{% endif %}{% endfor %}",
                   R"({"xs": ["a", "b", "c"]})"),
            "1/3F,2/3,3/3");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{% endfor %}"), "24");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "12");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "13");
  // A set inside a loop is gone after it; a namespace carries state out.
  EXPECT_EQ(render("{% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}"), "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(render("{% if a %}A{% elif b %}B{% else %}C{% endif %}", R"({"a": false, "b": true})"), "B");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}in {{ 1 + 1 }}{% endset %}[{{ block }}]"), "[in 2]");
}

TEST(Jinja, MacrosAndCalls) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bo', punct='?') }}"),
            "Hi Ann! Hi Bo?");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}"), "<body>");
  EXPECT_EQ(render("{% macro m() %}{{ varargs | length }}{% endmacro %}{{ m(1, 2, 3) }}"), "3");
  EXPECT_NE(render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").find("at most 1"), std::string::npos);
}

TEST(Jinja, WhitespaceControlAsTransformersSetsIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it goes.
  EXPECT_EQ(render("a\n  {% if true %}\nb\n  {% endif %}\nc\n"), "a\nb\nc");
  EXPECT_EQ(render("a   {%- if true -%}   b   {%- endif -%}   c"), "abc");
  EXPECT_EQ(render("a {{- ' x ' -}} b"), "a x b");
  EXPECT_EQ(render("a {#- comment -#} b"), "ab");
}

TEST(Jinja, StrftimeNowUsesTheGivenClock) {
  RenderOptions o;
  o.now_unix_seconds = 1721997000;  // 2024-07-26 12:30 UTC
  o.utc = true;
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y %H:%M %B %%') }}", "{}", o), "26 Jul 2024 12:30 July %");
}

TEST(Jinja, ErrorsNameTheLine) {
  EXPECT_EQ(render("ok\n{{ raise_exception('Only user and assistant roles are supported') }}"),
            "ERROR: line 2: Only user and assistant roles are supported");
  EXPECT_EQ(render("a\nb\n{% if x %}\nnever closed"), "PARSE ERROR: line 4: 'if' is never closed");
  EXPECT_EQ(render("{{ 'unterminated }}"),
            "PARSE ERROR: line 1: unexpected end of the template (an unterminated string?)");
  EXPECT_EQ(render("\n\n{% frobnicate %}"), "PARSE ERROR: line 3: unknown statement 'frobnicate'");
  EXPECT_EQ(render("x\n{{ 1 | nosuchfilter }}"), "ERROR: line 2: unknown filter 'nosuchfilter' for a number");
  EXPECT_EQ(render("{{ x.y.z }}", R"({"x": 1})"), "");  // attribute of a number: undefined, as in the reference
  EXPECT_EQ(render("{{ [1] < 2 }}").rfind("ERROR: line 1: unsupported operator '<'", 0), 0u);
  EXPECT_EQ(render("{% break %}"), "ERROR: 'break' or 'continue' outside a loop");
}

TEST(Jinja, RenderingIsBounded) {
  // Endless recursion stops at the call-depth limit.
  auto r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(r.find("calls nest deeper than"), std::string::npos) << r;
  // Nested loops that would run for hours stop at the step budget.
  RenderOptions o;
  o.limits.max_steps = 100000;
  r = render("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}", "{}", o);
  EXPECT_NE(r.find("more than 100000 steps"), std::string::npos) << r;
  // Output that doubles without end stops at the size cap.
  o = {};
  o.limits.max_output_bytes = 1 << 16;
  r = render(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{{ ns.s }}"
      "{% endfor %}",
      "{}", o);
  EXPECT_NE(r.find("65536 bytes"), std::string::npos) << r;
  EXPECT_NE(render("{{ range(100000000) | length }}").find("exceeds the limit"), std::string::npos);
  // Deep nesting is a parse error, not a stack overflow.
  std::string deep(5000, '(');
  EXPECT_NE(render("{{ " + deep + "1" + std::string(5000, ')') + " }}").find("nests deeper"), std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(render(deep_ifs).find("nests deeper"), std::string::npos);
}

// Peak resident memory of this process so far, in MiB.
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// A model's template is untrusted input (issue 27): whatever path it takes to build memory, the render stops at
// the budget with ResourceExhausted naming the limit, and this process's peak memory stays far below what the
// template asked for.
TEST(Jinja, HostileTemplatesStopAtTheirBudgetWithDefaultLimits) {
  const double before = peak_rss_mib();
  auto limit_error = [](const std::string& src) {
    auto t = Template::parse(src);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return std::string();
    auto r = t->render({});
    EXPECT_FALSE(r.ok()) << "rendered " << (r.ok() ? r->size() : 0) << " bytes";
    if (r.ok()) return std::string();
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().to_string();
    return r.status().message();
  };
  // A string doubled 40 times, never printed (a terabyte): stops at the size of one value.
  EXPECT_NE(limit_error("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}")
                .find("grew past"),
            std::string::npos);
  // A 100000-element range walked 100000 times by nested loops: steps count iterations, not just evaluations.
  EXPECT_NE(limit_error("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}")
                .find("step limit"),
            std::string::npos);
  // A large string copied over and over, each copy dropped at once: stops at the copying limit.
  EXPECT_NE(limit_error("{% set ns = namespace(s='x') %}{% for i in range(22) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{% for i in range(100000) %}{% set t = ns.s ~ i %}{% endfor %}")
                .find("copying limit"),
            std::string::npos);
  // Distinct megabyte strings kept alive in a list: stops at the memory budget.
  EXPECT_NE(limit_error("{% set ns = namespace(s='x', l=[]) %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{% for i in range(1000) %}{% set ns.l = ns.l + [ns.s ~ i] %}{% endfor %}")
                .find("memory limit"),
            std::string::npos);
  // One large string held many times by a list, then joined or printed as JSON (a single call that would build
  // gigabytes): stops while the result grows.
  const std::string big =
      "{% set ns = namespace(s='x', l=[]) %}{% for i in range(22) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{% for i in range(1000) %}{% set ns.l = ns.l + [ns.s] %}{% endfor %}";
  EXPECT_NE(limit_error(big + "{{ ns.l | join('') }}").find("grew past"), std::string::npos);
  EXPECT_NE(limit_error(big + "{{ ns.l | tojson }}").find("grew past"), std::string::npos);
  EXPECT_NE(limit_error(big + "{{ ns.s.replace('x', ns.s) }}").find("grew past"), std::string::npos);
  // Two nested loops of 100000: stops at the step budget.
  EXPECT_NE(limit_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("step limit"),
            std::string::npos);
  // Recursion that branches (each level calls itself twice): the step budget again, not the stack.
  EXPECT_NE(limit_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                        "{{ f(60) }}")
                .find("step limit"),
            std::string::npos);
  // The default budget holds at most 256 MiB of values at once.
  EXPECT_LT(peak_rss_mib() - before, 600.0);
}

TEST(Jinja, AValueInsideItselfIsAnErrorNotAStackOverflow) {
  const std::string r = render("{% set ns = namespace(x=1) %}{% set ns.me = [ns] %}{{ ns.me | tojson }}");
  EXPECT_EQ(r.rfind("ERROR:", 0), 0u) << r.substr(0, 200);
  EXPECT_NE(r.find("nest deeper"), std::string::npos) << r.substr(0, 200);
}

TEST(Jinja, ARenderStopsWhenItsCallerCancels) {
  auto t = Template::parse("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(t.ok());
  RenderOptions o;
  o.limits.max_steps = uint64_t{1} << 50;  // nothing but the cancellation stops it
  int polls = 0;
  o.cancelled = [&polls] { return ++polls == 3; };
  auto r = t->render({}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string();
  EXPECT_EQ(polls, 3);
}

TEST(Jinja, GarbageNeverCrashes) {
  // Every prefix of a real-looking template either renders or fails with a message.
  const std::string src =
      "{%- for m in messages -%}{{ '<|' ~ m['role'] ~ '|>' }}{% if m.content is string %}{{ m.content | trim }}"
      "{%- else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}{{ '\\n' }}{%- endfor -%}"
      "{%- if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";
  for (size_t n = 0; n <= src.size(); ++n) {
    std::string out = render(src.substr(0, n), R"({"messages": [{"role": "user", "content": "hi"}]})");
    (void)out;
  }
  EXPECT_EQ(render(src, R"({"messages": [{"role": "user", "content": " hi "}], "add_generation_prompt": true})"),
            "<|user|>hi\n<|assistant|>");
}

}  // namespace
}  // namespace tessera::model::jinja
