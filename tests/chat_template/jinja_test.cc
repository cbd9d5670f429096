// Unit tests of the Jinja interpreter: each test pins one behaviour of Jinja 3.1 in HF's configuration
// (trim_blocks, lstrip_blocks, json.dumps tojson, raise_exception) or one safety limit.
#include <string>

#include <gtest/gtest.h>

#include "chat/template/jinja.h"
#include "chat/template/text_util.h"

namespace m3::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object(),
                   const RenderLimits& limits = {}) {
  return Template(src).render(ctx, limits);
}

// Renders and returns the error message; fails the test when rendering succeeds.
std::string error_of(const std::string& src, const json& ctx = json::object(),
                     const RenderLimits& limits = {}) {
  try {
    std::string out = render(src, ctx, limits);
    ADD_FAILURE() << "expected an error, rendered: " << out;
  } catch (const m3::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(JinjaWhitespace, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nend"), "yes\nend");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("a {% if true %}b{% endif %} c"), "a b c");  // lstrip only at line start
  EXPECT_EQ(render("{{ 'a' }}\n{{ 'b' }}\n"), "a\nb");          // no trim after }}, final newline dropped
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
}

TEST(JinjaWhitespace, MinusAndPlusModifiers) {
  EXPECT_EQ(render("a   {%- if true -%}   b   {%- endif -%}   c"), "abc");
  EXPECT_EQ(render("a \n {{- 'x' -}} \n b"), "axb");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("a\xE3\x80\x80{{- 'b' }}"), "ab");  // U+3000 is whitespace to Python
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc"), "a\nb\nc");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaLoops, LoopVariables) {
  json ctx = {{"l", {"a", "b", "c"}}};
  EXPECT_EQ(render("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }} {% endfor %}",
                   ctx),
            "103TrueFalse3 212FalseFalse3 321FalseTrue3 ");
  EXPECT_EQ(render("{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}", ctx),
            "[|b][a|c][b|]");
  EXPECT_EQ(render("{% for x in l %}{{ loop.cycle('o', 'e') }}{% endfor %}", ctx), "oeo");
}

TEST(JinjaLoops, ElseFilterUnpackBreakContinue) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(render("{% for k, v in d.items() if v is not none %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"a", 1}, {"b", nullptr}, {"c", 0}}}}),
            "a=1;c=0;");
  EXPECT_EQ(
      render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}"
             "{% endif %}{{ i }}{% endfor %}"),
      "013");
  // A set inside the body does not outlive the iteration; namespace() carries state across iterations.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
            "120");
  EXPECT_EQ(
      render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}"
             "{{ ns.n }}"),
      "6");
}

TEST(JinjaLoops, RecursiveLoop) {
  json tree = json::parse(R"([{"n":"a","c":[{"n":"b","c":[]},{"n":"c","c":[{"n":"d"}]}]}])");
  EXPECT_EQ(render("{% for x in t recursive %}<{{ x.n }}{% if x.c %}{{ loop(x.c) }}{% endif %}>{% endfor %}",
                   {{"t", tree}}),
            "<a<b><c<d>>>");
}

TEST(JinjaMacros, DefaultsKeywordsRecursionCaller) {
  EXPECT_EQ(
      render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, b=2) }}|[{{ m() }}]"),
      "1B|12|[B]");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}"),
            "4321");
  EXPECT_EQ(render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"), "<in>");
  EXPECT_EQ(render("{% macro m() %}a</t>b{% endmacro %}{% set r = m() %}{{ r.split('</t>')[-1] }}"), "b");
  EXPECT_TRUE(contains(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), "takes not more than 1"));
}

TEST(JinjaMacros, MacroSeesDefiningScopeNotCallerLoop) {
  EXPECT_EQ(render("{% set g = 1 %}{% macro m() %}{{ g }}{{ loop is defined }}{% endmacro %}{% set g = 2 %}"
                   "{% for i in [0] %}{{ m() }}{% endfor %}"),
            "2False");
}

TEST(JinjaScoping, UnconditionalTopLevelSetHidesContextBeforehand) {
  // Jinja resolves `s` at its first top-level reference, an unconditional set: loops before it see nothing.
  json ctx = {{"s", "ctx"}};
  EXPECT_EQ(render("{% for i in [1] %}[{{ s }}]{% endfor %}{% set s = 1 %}{{ s }}", ctx), "[]1");
  EXPECT_EQ(render("{% for i in [1] %}[{{ s }}]{% endfor %}{% if 1 %}{% set s = 1 %}{% endif %}", ctx),
            "[ctx]");
  EXPECT_EQ(render("{{ s }}{% set s = 1 %}{{ s }}", ctx), "ctx1");
  EXPECT_EQ(render("{% if v is not defined %}{% set v = 'd' %}{% endif %}{{ v }}", {{"v", "given"}}),
            "given");
}

TEST(JinjaFilters, Common) {
  EXPECT_EQ(render("{{ ' a '|trim }}|{{ 'ab'|upper }}|{{ [3, 1, 2]|sort|join(',') }}|{{ [1, 2]|length }}"
                   "|{{ none|default('d') }}|{{ nope|default('d') }}|{{ [1, 2]|first }}{{ [1, 2]|last }}"),
            "a|AB|1,2,3|2|None|d|12");
  json l = json::parse(R"([{"r":"user","c":1},{"r":"ai","c":2},{"r":"user","c":3}])");
  EXPECT_EQ(
      render("{{ l|selectattr('r', 'equalto', 'user')|map(attribute='c')|join(',') }}|"
             "{{ l|rejectattr('r', 'equalto', 'user')|list|length }}|{{ l|map(attribute='r')|unique|list }}",
             {{"l", l}}),
      "1,3|1|['user', 'ai']");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2) }}|{{ 'abc'|replace('b', 'x') }}|{{ '42'|int + 1 }}|{{ 2.5|round }}"),
            "a\n  b|axc|43|2.0");
  EXPECT_TRUE(contains(error_of("{{ 1|nosuchfilter }}"), "No filter named 'nosuchfilter'"));
}

TEST(JinjaTests, TypeTests) {
  EXPECT_EQ(
      render(
          "{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is number }}"
          "{{ true is boolean }}{{ none is none }}{{ x is defined }}{{ x is undefined }}{{ 3 is odd }}"
          "{{ [] is sequence }}{{ 2 is in [1, 2] }}{{ 1 is eq 1 }}"),
      "TrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ x is not none }}{{ not x is defined }}", {{"x", nullptr}}), "FalseFalse");
}

TEST(JinjaToJson, MatchesPythonJsonDumps) {
  json d = json::parse(R"({"z": 1, "a": [true, null, 1.5, "é☕\"\\\n<&>"], "m": {}, "l": []})");
  EXPECT_EQ(render("{{ d|tojson }}", {{"d", d}}),
            "{\"z\": 1, \"a\": [true, null, 1.5, \"é☕\\\"\\\\\\n<&>\"], \"m\": {}, \"l\": []}");
  EXPECT_EQ(render("{{ d|tojson(indent=2) }}", {{"d", json::parse(R"({"a":[1,{"b":2}],"c":{}})")}}),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ],\n  \"c\": {}\n}");
  EXPECT_EQ(render("{{ 'é😀'|tojson(ensure_ascii=True) }}"), "\"\\u00e9\\ud83d\\ude00\"");
  EXPECT_EQ(render("{{ d|tojson(sort_keys=True, separators=(',', ':')) }}",
                   {{"d", json::parse(R"({"b":1,"a":2})")}}),
            "{\"a\":2,\"b\":1}");
  EXPECT_EQ(render("{{ [1.0, 1e-05, 1e16, 0.1, 1e15]|tojson }}"),
            "[1.0, 1e-05, 1e+16, 0.1, 1000000000000000.0]");
  EXPECT_TRUE(contains(error_of("{{ nope|tojson }}"), "not JSON serializable"));
}

TEST(JinjaValues, PythonStrAndRepr) {
  EXPECT_EQ(render("{{ none }}|{{ true }}|{{ 1.0 }}|{{ [1, 'a', none] }}|{{ {'k': (1,)} }}|{{ \"it's\" }}"),
            "None|True|1.0|[1, 'a', None]|{'k': (1,)}|it's");
  EXPECT_EQ(render("{{ [\"it's\", 'q\"', '\\n'] }}"), "[\"it's\", 'q\"', '\\n']");
  EXPECT_EQ(text::float_repr(1e22), "1e+22");
  EXPECT_EQ(text::float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(text::float_repr(0.0001), "0.0001");
  EXPECT_EQ(text::float_repr(-0.0), "-0.0");
}

TEST(JinjaUndefined, DefaultUndefinedSemantics) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope|length }}{% for x in nope %}x{% endfor %}{{ nope is defined }}"),
            "[]0False");
  EXPECT_EQ(render("{{ d.missing is defined }}|[{{ d.missing }}]|[{{ l[7] }}]|[{{ n.x }}]",
                   {{"d", json::object()}, {"l", json::array()}, {"n", nullptr}}),
            "False|[]|[]|[]");
  // Like jinja2.Undefined (not ChainableUndefined): using an undefined value further is an error.
  EXPECT_TRUE(contains(error_of("{{ nope.attr }}"), "'nope' is undefined"));
  EXPECT_TRUE(
      contains(error_of("{{ d.a.b }}", {{"d", json::object()}}), "'dict object' has no attribute 'a'"));
  EXPECT_TRUE(contains(error_of("{{ nope + 1 }}"), "'nope' is undefined"));
}

TEST(JinjaErrors, RaiseExceptionMessageIsVerbatim) {
  try {
    render("{% if true %}{{ raise_exception('Bad role: ' ~ r) }}{% endif %}", {{"r", "x"}});
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_STREQ(e.what(), "Bad role: x");
    EXPECT_TRUE(e.user_raised());
    EXPECT_EQ(e.line(), 1);
  }
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_TRUE(contains(error_of("a\nb\n{{ 1 + }}"), "(line 3)"));
  EXPECT_TRUE(contains(error_of("x\n{% if true %}\ny"), "(line 3)"));
  EXPECT_TRUE(contains(error_of("x\n{% if true %}\ny"), "'endif'"));
  EXPECT_TRUE(contains(error_of("\n\n\n{% frob %}"), "(line 4): Encountered unknown tag 'frob'"));
  EXPECT_TRUE(contains(error_of("{# open"), "Missing end of comment tag"));
  EXPECT_TRUE(contains(error_of("{{ 'abc }}"), "(line 1)"));
  EXPECT_TRUE(contains(error_of("{% break %}"), "outside of a loop"));
  EXPECT_TRUE(contains(error_of("{% include 'x' %}"), "not supported"));
  EXPECT_TRUE(contains(error_of("line1\n{{ 1 / 0 }}"), "(line 2): division by zero"));
}

TEST(JinjaLimits, RecursionDepth) {
  std::string msg = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_TRUE(contains(msg, "recursion") || contains(msg, "too deep")) << msg;
}

TEST(JinjaLimits, ParserNesting) {
  EXPECT_TRUE(
      contains(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), "too deep"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(5000, '[') + " }}"), "line 1"));
  std::string ifs;
  for (int i = 0; i < 3000; ++i) ifs += "{% if 1 %}";
  EXPECT_TRUE(contains(error_of(ifs), "too deep"));
  EXPECT_TRUE(contains(error_of("{{ " + std::string(3000, '-') + "1 }}"), "too deep"));
}

TEST(JinjaLimits, OutputSizeStepsAndMemory) {
  RenderLimits small;
  small.max_output_bytes = 1000;
  EXPECT_TRUE(
      contains(error_of("{% for i in range(2000) %}x{% endfor %}", json::object(), small), "exceeds"));
  RenderLimits few_steps;
  few_steps.max_steps = 10000;
  EXPECT_TRUE(
      contains(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                        json::object(), few_steps),
               "budget"));
  RenderLimits little_memory;
  little_memory.max_alloc_bytes = 1 << 20;
  EXPECT_TRUE(
      contains(error_of("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}{{ ns.s|length }}",
                        json::object(), little_memory),
               "memory budget"));
  EXPECT_TRUE(contains(error_of("{{ 'x' * 100000000000 }}"), "memory budget"));
  EXPECT_TRUE(contains(error_of("{{ 'x' * 10000000000000000 }}"), "too large"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 2000; ++i) chain += " + 1";
  EXPECT_TRUE(contains(error_of(chain + " }}"), "expression is too deep"));
  EXPECT_TRUE(contains(error_of("{{ range(200000)|length }}"), "Range too big"));
}

TEST(JinjaLimits, SharedStructuresDoNotExplode) {
  // 2^60 leaves through sharing: printing or serialising must hit the budget, not run forever.
  RenderLimits limits;
  limits.max_alloc_bytes = 8 << 20;
  const std::string build =
      "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}";
  EXPECT_TRUE(contains(error_of(build + "{{ ns.x|tojson }}", json::object(), limits), "budget"));
  EXPECT_TRUE(contains(error_of(build + "{{ ns.x }}", json::object(), limits), "budget"));
  EXPECT_TRUE(contains(error_of(build + "{{ ns.x == ns.x }}", json::object(), limits), "expensive"));
}

TEST(JinjaLimits, DeepAndCyclicValuesAreSafe) {
  // A 50000-deep nested list is built, dropped and freed without recursion.
  EXPECT_EQ(
      render(
          "{% set ns = namespace(x=[]) %}{% for i in range(50000) %}{% set ns.x = [ns.x] %}{% endfor %}ok"),
      "ok");
  EXPECT_TRUE(
      contains(error_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
                        "{% endfor %}{{ ns.x }}"),
               "too deep"));
  // A list that contains itself renders (Python would print [[...]]; here the depth cap stops it).
  EXPECT_TRUE(contains(error_of("{% set l = [] %}{% do l.append(l) %}{{ l }}"), "too deep"));
  EXPECT_EQ(render("{% set l = [] %}{% do l.append(l) %}{{ l|length }}"), "1");
  EXPECT_TRUE(
      contains(error_of("{% set ns = namespace(x=()) %}{% for i in range(5000) %}{% set ns.x = (ns.x,) %}"
                        "{% endfor %}{{ {ns.x: 1}|length }}"),
               "too deep"));
}

TEST(JinjaContext, JsonValuesBecomePythonValues) {
  json ctx = json::parse(R"({"i": 3, "f": 2.0, "b": false, "n": null, "s": "é", "l": [1], "d": {"k": "v"}})");
  EXPECT_EQ(
      render("{{ i }}|{{ f }}|{{ b }}|{{ n }}|{{ s }}|{{ l }}|{{ d }}|{{ i is integer }}{{ f is float }}",
             ctx),
      "3|2.0|False|None|é|[1]|{'k': 'v'}|TrueTrue");
}

}  // namespace
}  // namespace m3::jinja
