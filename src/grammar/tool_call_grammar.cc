// The XML value encoding of MiniMax-M3 tool-call parameters for the shared schema walker, and the block
// around the invokes. Invariants: no string value can contain the namespace marker, and every alternative
// the grammar keeps reads back through tool_schema.cc's in-order conversion as a value its branch allows.
#include "grammar/tool_call_grammar.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "chat/parsers/markup_lexer.h"
#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace m3::grammar {
namespace {

using schema::Alternative;
using schema::concat;
using schema::Json;
using schema::Kind;

const std::string kNs(kMinimaxNamespace);
// What a leaf alternative before a string may read from its text: numbers (trimmed, signed, "5", ".5") and,
// for objects/arrays, JSON text or nothing at all.
constexpr std::string_view kNumericStart = "0123456789+-. \t\n\r\f\v";
constexpr std::string_view kContainerStart = "[{ \t\n\r\f\v";
constexpr int kMaxExtraKey = 64;

// The ASCII bytes in [lo, hi] other than `except`.
ByteSet ascii_set(uint8_t lo, uint8_t hi, std::string_view except) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b)
    if (except.find(static_cast<char>(b)) == std::string_view::npos) s.add(static_cast<uint8_t>(b));
  return s;
}

// Text the lexer (chat/parsers/markup_lexer.cc) reads back whole from one tag: no '<', '>' or line break
// (nor `forbidden`), no surrounding blanks (it trims), not near its tag length limit.
bool fits_tag(const std::string& name, std::string_view forbidden) {
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  return !name.empty() && name.size() <= 200 && name.find_first_of("<>\n\r") == std::string::npos &&
         name.find_first_of(forbidden) == std::string::npos && !blank(name.front()) && !blank(name.back());
}

class XmlEncoding final : public schema::ValueEncoding {
 public:
  XmlEncoding(Grammar& g, std::string error_prefix)
      : ValueEncoding(g, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                      std::move(error_prefix)) {}

  Symbol string(const schema::StringSpec& spec) override { return *text(spec, "", true); }
  Sequence literal(const Json& v) override {
    return g_.literal(v.is_string() ? v.get_ref<const std::string&>() : schema::json_text(v, true));
  }
  Symbol any() override { return *text({}, "", true); }
  bool supports_prefix_items() const override { return false; }

  Symbol object(const schema::ObjectSpec& spec) override {
    Sequence body;
    for (const schema::PropertySpec& p : spec.properties) {
      check_tag(p.name, spec.pointer);
      if (p.null_only && !p.required) continue;  // the template leaves null arguments out
      const Sequence e = element(g_.literal(p.name), p.value);
      body.push_back(p.required ? g_.intern("param", {e}) : g_.optional("param", e));
    }
    if (spec.extra)
      body.push_back(g_.star("extra_params", element({extra_key(spec.listed_keys)}, spec.extra_value)));
    return g_.intern("params", {body});
  }

  Symbol array(const schema::ArraySpec& spec) override {
    if (!spec.rest) return g_.intern("empty", {{}});
    return g_.repeat("items", element(g_.literal("item"), spec.rest_value), spec.min, spec.max);
  }

  Symbol join(const std::vector<Alternative>& alts) override {
    if (alts.size() == 1) return alts[0].symbol;
    const bool has_null =
        std::any_of(alts.begin(), alts.end(), [](const auto& a) { return a.kind == Kind::kNull; });
    const bool verbatim = reads_all_text(alts[0]) && !has_null;  // the parser streams the value as raw text
    bool string_seen = false, container_seen = false, bounded_number = false;
    bool restrict = false, first_string_narrow = false;
    std::string forbid;
    std::vector<Sequence> kept;
    for (const Alternative& a : alts) {
      if (a.kind == Kind::kNull) {
        kept.push_back({a.symbol});
      } else if (a.kind == Kind::kObject || a.kind == Kind::kArray) {
        if (container_seen || verbatim || (string_seen && first_string_narrow && may_be_empty(a))) continue;
        container_seen = true;
        kept.push_back({a.symbol});
      } else if (reads_all_text(a)) {
        if (!string_seen) {
          string_seen = true;
          restrict = bounded_number || container_seen;
          if (bounded_number) forbid += kNumericStart;
          if (container_seen) forbid += kContainerStart;
          first_string_narrow = restrict || a.kind == Kind::kEnum || a.string.constrained();
        }
        if (!restrict) {
          kept.push_back({a.symbol});
        } else if (a.kind != Kind::kEnum) {
          if (const auto s = text(a.string, forbid, !container_seen)) kept.push_back({*s});
        }
      } else if (!string_seen) {  // boolean, integer, number, an enum the parser reads by value
        bounded_number = bounded_number ||
                         ((a.kind == Kind::kInteger || a.kind == Kind::kNumber) &&
                          (a.node->contains("minimum") || a.node->contains("maximum") ||
                           a.node->contains("exclusiveMinimum") || a.node->contains("exclusiveMaximum")));
        kept.push_back({a.symbol});
      }
    }
    std::vector<Sequence> unique;
    for (Sequence& s : kept)
      if (std::find(unique.begin(), unique.end(), s) == unique.end()) unique.push_back(std::move(s));
    return g_.choice("any_of", std::move(unique));
  }

 private:
  // The parser reads any leaf text as this alternative's string (typed enums it reads by their type).
  static bool reads_all_text(const Alternative& a) {
    if (a.kind == Kind::kString || a.kind == Kind::kAny) return true;
    if (a.kind != Kind::kEnum || !a.node->contains("type")) return false;
    const Json& t = (*a.node)["type"];
    return t == "string" || (t.is_array() && std::find(t.begin(), t.end(), Json("string")) != t.end());
  }
  static bool may_be_empty(const Alternative& a) {
    if (a.kind == Kind::kArray) return !a.node->contains("minItems") || (*a.node)["minItems"] == 0;
    return !a.node->contains("required") || (*a.node)["required"].empty();
  }

  // One code point other than the given ASCII characters.
  Symbol except(std::string_view ascii) {
    std::vector<Sequence> alts{{g_.bytes(ascii_set(0, 0x7F, ascii))}};
    g_.utf8_range(0x80, 0x10FFFF, &alts);
    return g_.intern("char", std::move(alts));
  }

  // Raw text for a string value; `forbid`: characters it may not start with (then also `allow_empty`).
  // nullopt: no such text can be built (a pattern cannot be narrowed).
  std::optional<Symbol> text(const schema::StringSpec& spec, std::string_view forbid, bool allow_empty) {
    if (!spec.regex.empty()) {
      if (!forbid.empty() || !allow_empty) return std::nullopt;
      return add_regex(g_, spec.regex, "pattern");
    }
    if (spec.min_length > 1 || spec.max_length >= 0) {  // a counted run of characters other than '<'
      std::vector<Sequence> alts;
      if (spec.min_length == 0 && allow_empty) alts.push_back({});
      if (spec.max_length != 0)
        alts.push_back({except(std::string(forbid) + "<"),
                        g_.repeat("text_chars", {except("<")}, std::max(0, spec.min_length - 1),
                                  spec.max_length < 0 ? -1 : spec.max_length - 1)});
      if (alts.empty()) return std::nullopt;
      return g_.choice("bounded_text", std::move(alts));
    }
    allow_empty = allow_empty && spec.min_length == 0;
    // Text without the marker: a run without ']', then segments that each start at a ']'. A segment "]<"
    // (P) may not be followed by one that spells the rest of the marker (Q = "]minimax[>[..."), so runs of
    // P end the text or are followed by an ordinary segment (R).
    const std::string tail = "minimax[>[";
    const Symbol run = g_.star("text_run", {except("]")});
    std::optional<Symbol> partial;  // after "]" and tail[0..k): leave the marker, end, or go on matching
    for (int k = static_cast<int>(tail.size()) - 1; k >= 1; --k) {
      std::vector<Sequence> alts{{}, {except(std::string("]") + tail[k]), run}};
      if (partial) alts.push_back({g_.bytes(ByteSet::of(tail[k])), *partial});
      partial = g_.choice("text_partial", std::move(alts));
    }
    const Symbol r =
        g_.intern("text_segment",
                  {concat({g_.literal("]"),
                           {g_.choice("text_segment_body",
                                      {{},
                                       {g_.bytes(ByteSet::of('<')), g_.plus("text_run1", {except("]")})},
                                       {except("]<m"), run},
                                       {g_.bytes(ByteSet::of('m')), *partial}})}})});
    const Sequence p = g_.literal("]<");
    const Symbol unit =
        g_.choice("text_unit", {concat({g_.literal("]" + tail), {run}}), {r}, {g_.plus("text_opens", p), r}});
    const Symbol opens = g_.star("text_opens", p);
    if (forbid.empty() && allow_empty)
      return g_.intern("text", {{run, g_.star("text_units", {unit}), opens}});
    std::vector<Sequence> alts{
        {except(std::string("]") + std::string(forbid)), run, g_.star("text_units", {unit}), opens},
        {g_.plus("text_units", {unit}), opens},
        {g_.plus("text_opens", p)}};
    if (allow_empty) alts.push_back({});
    return g_.choice("text_nonempty", std::move(alts));
  }

  Sequence element(Sequence key, Symbol value) {
    return concat(
        {g_.literal(kNs + "<"), key, g_.literal(">"), {value}, g_.literal(kNs + "</"), key, g_.literal(">")});
  }

  // The lexer must read the tag back as this property's name, and not as structure.
  void check_tag(const std::string& name, const std::string& pointer) const {
    if (!fits_tag(name, "") || name[0] == '/' || name == "tool_call" || name == "invoke" ||
        name.rfind("invoke ", 0) == 0 || name.rfind("invoke\t", 0) == 0)
      fail("property name '" + name + "' cannot be written as a tool-call markup tag", pointer);
  }

  // Keys for extra properties: a trie walk that leaves every excluded word (exact matches only).
  Symbol extra_key(std::vector<std::string> excluded) {
    excluded.push_back("invoke");
    excluded.push_back("tool_call");
    std::vector<std::string> words;
    for (const std::string& w : excluded) {
      const bool fits = w.size() <= kMaxExtraKey && std::all_of(w.begin(), w.end(), [](char c) {
                          return c > 0x20 && c < 0x7F && c != '<' && c != '>' && c != '/';
                        });
      if (fits) words.push_back(w);
    }
    return key_node(words, 0);
  }
  Symbol key_node(const std::vector<std::string>& words, size_t depth) {
    std::map<char, std::vector<std::string>> next;
    std::string taken = "<>/";
    bool excluded_here = false;
    for (const std::string& w : words) {
      if (w.size() == depth) {
        excluded_here = true;
      } else {
        next[w[depth]].push_back(w);
        taken += w[depth];
      }
    }
    std::vector<Sequence> alts;
    if (depth > 0 && !excluded_here) alts.push_back({});
    if (depth < kMaxExtraKey) {
      const int rest = kMaxExtraKey - 1 - static_cast<int>(depth);
      alts.push_back({g_.bytes(ascii_set(0x21, 0x7E, taken)),
                      g_.repeat("key_chars", {g_.bytes(ascii_set(0x21, 0x7E, "<>/"))}, 0, rest)});
      for (const auto& [c, ws] : next)
        alts.push_back({g_.bytes(ByteSet::of(static_cast<uint8_t>(c))), key_node(ws, depth + 1)});
    }
    return g_.choice("extra_key", std::move(alts));
  }
};

}  // namespace

Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, std::string_view only, bool parallel,
                          bool content_first) {
  static const Json kAnyParameters = {{"type", "object"}, {"additionalProperties", true}};
  Grammar g;
  std::vector<Sequence> invokes;
  std::set<std::string> seen;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& tool = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!seen.insert(tool.name).second) continue;  // the parser uses a name's first definition
    if (!only.empty() && tool.name != only) continue;
    if (!fits_tag(tool.name, "\""))  // invoke_name() reads it between quotes
      fail(ErrorKind::kInvalidArgument,
           where + ": tool name '" + tool.name + "' cannot be written in tool-call markup");
    const Json& p = tool.parameters;
    const Json& params = p.is_null() || (p.is_object() && p.empty()) ? kAnyParameters : p;
    if (!params.is_object() || (params.contains("type") && params["type"] != "object"))
      fail(ErrorKind::kInvalidArgument, where + ".parameters: must be the JSON schema of an object");
    XmlEncoding encoding(g, where + ".parameters");
    const Symbol args = schema::walk(encoding, params, params, /*strict=*/true);
    invokes.push_back(concat(
        {g.literal(kNs + "<invoke name=\"" + tool.name + "\">"), {args}, g.literal(kNs + "</invoke>\n")}));
  }
  if (invokes.empty())
    fail(ErrorKind::kInvalidArgument,
         only.empty() ? std::string("tool_call_grammar: no tools")
                      : "tool_choice names '" + std::string(only) + "', which is not among the tools");
  const Symbol invoke = g.choice("invoke", std::move(invokes));
  const int32_t root = g.add_rule("root");
  const Sequence block = concat({g.literal(kNs + "<tool_call>\n"),
                                 {parallel ? g.plus("invokes", {invoke}) : invoke},
                                 g.literal(kNs + "</tool_call>")});
  if (content_first) {  // prose without the marker, then the block or nothing
    const Symbol content = XmlEncoding(g, "content").any();
    g.add_alternative(root, concat({{content}, block}));
    g.add_alternative(root, {content});
  } else {
    g.add_alternative(root, block);
  }
  g.set_root(root);
  g.validate();
  return g;
}

}  // namespace m3::grammar
