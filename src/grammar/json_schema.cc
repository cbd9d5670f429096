// JSON text from a JSON schema: the number, boolean and null pieces both encodings share, and the JSON
// encoding of strings, objects and arrays (properties in schema order). The schema walk is schema_walker.cc.
#include "grammar/json_schema.h"

#include <algorithm>
#include <functional>
#include <map>

#include "common/error.h"
#include "grammar/regex.h"

namespace m3::grammar {
namespace schema {
namespace {

std::string decimal(Int128 v) {  // v >= 0
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v > 0);
  return s;
}

ByteSet byte_set(std::string_view chars) {
  ByteSet s;
  for (char c : chars) s.add(static_cast<uint8_t>(c));
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Shared value pieces: numbers, booleans, null.

ValueEncoding::ValueEncoding(Grammar& g, Int128 int_min, Int128 int_max, std::string error_prefix)
    : g_(g), int_min_(int_min), int_max_(int_max), error_prefix_(std::move(error_prefix)) {}

void ValueEncoding::fail(const std::string& message, const std::string& pointer) const {
  m3::fail(ErrorKind::kInvalidArgument,
           error_prefix_ + ": " + message + " at " + (pointer.empty() ? "the schema root" : pointer));
}

Symbol ValueEncoding::digits(int min, int max) {
  return g_.repeat("digits", {g_.bytes(ByteSet::range('0', '9'))}, min, max);
}

// Digit strings of one length between lo and hi (leading zeros allowed: this is a suffix of a number).
Symbol ValueEncoding::digit_range(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  size_t p = 0;
  while (p < n && lo[p] == hi[p]) ++p;
  if (p == n) return g_.intern("digits_exact", {g_.literal(lo)});
  const std::string a = lo.substr(p + 1), b = hi.substr(p + 1);
  const size_t rest = n - p - 1;
  char first = lo[p], last = hi[p];
  std::vector<Sequence> alts;
  std::optional<Sequence> upper;
  if (a.find_first_not_of('0') != std::string::npos) {
    alts.push_back({g_.bytes(ByteSet::of(first)), digit_range(a, std::string(rest, '9'))});
    ++first;
  }
  if (b.find_first_not_of('9') != std::string::npos) {
    upper = {g_.bytes(ByteSet::of(last)), digit_range(std::string(rest, '0'), b)};
    --last;
  }
  if (first <= last) alts.push_back({g_.bytes(ByteSet::range(first, last))});
  if (first <= last && rest) alts.back().push_back(digits(rest, rest));
  if (upper) alts.push_back(*upper);
  const Symbol body = g_.choice("digit_range", std::move(alts));
  if (p == 0) return body;
  return g_.intern("digit_range", {concat({g_.literal(lo.substr(0, p)), {body}})});
}

// Numbers without leading zeros between lo and hi (decimal strings, lo <= hi).
Symbol ValueEncoding::magnitude_range(const std::string& lo_in, const std::string& hi) {
  std::vector<Sequence> alts;
  std::string lo = lo_in;
  if (lo == "0") {
    alts.push_back(g_.literal("0"));
    if (hi == "0") return g_.choice("magnitude", std::move(alts));
    lo = "1";
  }
  // Lengths whose every number is in range form one run: [1-9][0-9]{a,b}.
  int full_lo = -1, full_hi = -1;
  for (size_t len = lo.size(); len <= hi.size(); ++len) {
    const std::string a = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
    const std::string b = len == hi.size() ? hi : std::string(len, '9');
    if (a == "1" + std::string(len - 1, '0') && b == std::string(len, '9')) {
      if (full_lo < 0) full_lo = static_cast<int>(len);
      full_hi = static_cast<int>(len);
    } else {
      alts.push_back({digit_range(a, b)});
    }
  }
  if (full_lo > 0) {
    alts.push_back({g_.bytes(ByteSet::range('1', '9'))});
    if (full_hi > 1) alts.back().push_back(digits(full_lo - 1, full_hi - 1));
  }
  return g_.choice("magnitude", std::move(alts));
}

Symbol ValueEncoding::integer(Int128 lo, Int128 hi) {
  std::vector<Sequence> alts;
  if (lo < 0)
    alts.push_back({g_.bytes(ByteSet::of('-')), magnitude_range(decimal(hi < 0 ? -hi : 1), decimal(-lo))});
  if (hi >= 0) alts.push_back({magnitude_range(decimal(std::max<Int128>(lo, 0)), decimal(hi))});
  return g_.choice("integer", std::move(alts));
}

Symbol ValueEncoding::number(NumberSign sign) {
  const Symbol nonzero = g_.bytes(ByteSet::range('1', '9'));
  const Symbol int_part = g_.choice("int_part", {g_.literal("0"), {nonzero, digits(0, 19)}});
  const Symbol fraction = g_.optional("fraction", concat({g_.literal("."), {digits(1, 20)}}));
  const Symbol exponent = g_.optional(
      "exponent",
      {g_.bytes(byte_set("eE")), g_.optional("exp_sign", {g_.bytes(byte_set("+-"))}), digits(1, 2)});
  switch (sign) {
    case NumberSign::kAny:
      return g_.intern("number",
                       {{g_.optional("minus", {g_.bytes(ByteSet::of('-'))}), int_part, fraction, exponent}});
    case NumberSign::kNonNegative:
      return g_.intern("number_nonnegative", {{int_part, fraction, exponent}});
    case NumberSign::kPositive:
      break;
  }
  // Positive: a nonzero digit somewhere in the mantissa ("0.0" is not positive).
  const Symbol below_one = g_.intern(
      "below_one",
      {concat({g_.literal("0."), {g_.repeat("zeros", g_.literal("0"), 0, 19), nonzero, digits(0, 19)}})});
  const Symbol mantissa = g_.choice("positive_mantissa", {{nonzero, digits(0, 19), fraction}, {below_one}});
  return g_.intern("number_positive", {{mantissa, exponent}});
}

Symbol ValueEncoding::boolean() {
  return g_.choice("boolean", {g_.literal("true"), g_.literal("false")});
}

Symbol ValueEncoding::null() {
  return g_.intern("null", {g_.literal("null")});
}

// ---------------------------------------------------------------------------------------------------------
// JSON text.

namespace {

const Int128 kMax20Digits = [] {
  Int128 v = 1;
  for (int i = 0; i < 20; ++i) v *= 10;
  return v - 1;
}();

class JsonEncoding final : public ValueEncoding {
 public:
  JsonEncoding(Grammar& g, const JsonGrammarOptions& o)
      : ValueEncoding(g, -kMax20Digits, kMax20Digits, "json_schema"), o_(o) {}

  Symbol string(const StringSpec& spec) override {
    if (!spec.constrained()) return json_string();
    const Symbol body = spec.regex.empty()
                            ? g_.repeat("string_body", {json_char()}, spec.min_length, spec.max_length)
                            : add_regex_json_string_body(g_, spec.regex, "string_pattern");
    return g_.intern("string", {concat({g_.literal("\""), {body}, g_.literal("\"")})});
  }

  Sequence literal(const Json& value) override { return g_.literal(json_text(value, !o_.any_whitespace)); }

  // Properties in schema order, optional ones skippable: F_i = "the rest from property i, nothing written
  // yet (at least one to come)", R_i = "the rest from property i, after something was written".
  Symbol object(const ObjectSpec& spec) override {
    const Sequence extra_pair =
        spec.extra ? concat({{key_not_in(spec.listed_keys)}, colon(), {spec.extra_value}}) : Sequence{};
    Symbol rest = spec.extra ? g_.star("more_extras", concat({sep(), extra_pair})) : empty();
    std::optional<Symbol> first;
    if (spec.extra) first = g_.intern("extras", {concat({extra_pair, {rest}})});
    bool all_optional = true;
    for (size_t i = spec.properties.size(); i-- > 0;) {
      const PropertySpec& p = spec.properties[i];
      const Sequence pair = concat({g_.literal(json_text(Json(p.name), false)), colon(), {p.value}});
      std::vector<Sequence> r_alts{concat({sep(), pair, {rest}})}, f_alts{concat({pair, {rest}})};
      if (!p.required) {
        r_alts.push_back({rest});
        if (first) f_alts.push_back({*first});
      }
      all_optional = all_optional && !p.required;
      first = g_.choice("properties", std::move(f_alts));
      rest = g_.choice("more_properties", std::move(r_alts));
    }
    std::vector<Sequence> alts;
    if (all_optional) alts.push_back(concat({g_.literal("{"), ws(), g_.literal("}")}));
    if (first) alts.push_back(concat({g_.literal("{"), ws(), {*first}, ws(), g_.literal("}")}));
    return g_.choice("object", std::move(alts));
  }

  Symbol array(const ArraySpec& spec) override {
    std::vector<Sequence> alts;
    if (spec.min == 0) alts.push_back(concat({g_.literal("["), ws(), g_.literal("]")}));
    const int k = static_cast<int>(spec.prefix.size());
    if (spec.max != 0 && (k > 0 || spec.rest)) {
      if (const auto t = tail(spec, 1))
        alts.push_back(concat(
            {g_.literal("["), ws(), {k > 0 ? spec.prefix[0] : spec.rest_value, *t}, ws(), g_.literal("]")}));
    }
    return g_.choice("array", std::move(alts));
  }

  // An additional property's key: any JSON string when nothing is listed, else one that is none of `names`:
  // raw printable ASCII without escapes (so no spelling of a listed name slips through), through a trie of
  // the names.
  Symbol key_not_in(const std::vector<std::string>& names) {
    if (names.empty()) return json_string();
    struct Node {
      std::map<uint8_t, int> kids;
      bool is_name = false;
    };
    std::vector<Node> trie(1);
    const auto key_char = [](uint8_t c) { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\'; };
    for (const std::string& name : names) {
      if (!std::all_of(name.begin(), name.end(), [&](char c) { return key_char(static_cast<uint8_t>(c)); }))
        continue;  // a key of raw printable ASCII never spells it
      int n = 0;
      for (char c : name) {
        const auto [it, added] = trie[n].kids.emplace(static_cast<uint8_t>(c), static_cast<int>(trie.size()));
        if (added) trie.emplace_back();
        n = it->second;
      }
      trie[n].is_name = true;
    }
    ByteSet all;
    for (int c = 0; c < 256; ++c)
      if (key_char(static_cast<uint8_t>(c))) all.add(static_cast<uint8_t>(c));
    const Symbol rest = g_.star("key_rest", {g_.bytes(all)});
    const std::function<Symbol(int)> after = [&](int n) {  // the key's rest after trie node n
      std::vector<Sequence> alts;
      if (!trie[n].is_name) alts.push_back({});
      ByteSet off;
      for (int c = 0; c < 256; ++c)
        if (key_char(static_cast<uint8_t>(c)) && !trie[n].kids.count(static_cast<uint8_t>(c)))
          off.add(static_cast<uint8_t>(c));
      if (!off.empty()) alts.push_back({g_.bytes(off), rest});
      for (const auto& [c, kid] : trie[n].kids) alts.push_back({g_.bytes(ByteSet::of(c)), after(kid)});
      return g_.choice("unlisted_key", std::move(alts));
    };
    return g_.intern("extra_key", {concat({g_.literal("\""), {after(0)}, g_.literal("\"")})});
  }

  Symbol any() override {
    if (any_ >= 0) return Grammar::ref(any_);
    any_ = g_.add_rule("json_any");
    const Symbol self = Grammar::ref(any_);
    ObjectSpec o;
    o.extra = true;
    o.extra_value = self;
    ArraySpec a;
    a.rest = true;
    a.rest_value = self;
    for (Symbol s : {object(o), array(a), json_string(), number(NumberSign::kAny), boolean(), null()})
      g_.add_alternative(any_, {s});
    return self;
  }

  Symbol join(const std::vector<Alternative>& alternatives) override {
    if (alternatives.size() == 1) return alternatives[0].symbol;
    std::vector<Sequence> alts;
    for (const Alternative& a : alternatives)
      if (std::find(alts.begin(), alts.end(), Sequence{a.symbol}) == alts.end()) alts.push_back({a.symbol});
    return g_.choice("any_of", std::move(alts));
  }

 private:
  Sequence sep() { return separator(','); }
  Sequence colon() { return separator(':'); }
  Sequence separator(char c) {
    const Sequence w = ws();
    if (w.empty()) return g_.literal(o_.any_whitespace ? std::string(1, c) : std::string(1, c) + " ");
    return concat({w, g_.literal(std::string(1, c)), w});
  }
  Symbol empty() { return g_.intern("empty", {{}}); }
  // Whitespace between tokens (empty in the compact style).
  Sequence ws() {
    if (!o_.any_whitespace || o_.max_whitespace <= 0) return {};
    return {g_.repeat("ws", {g_.bytes(byte_set(" \t\n\r"))}, 0, o_.max_whitespace)};
  }

  // One character of a string body: a code point other than " \ and controls, or an escape sequence.
  Symbol json_char() {
    std::vector<Sequence> alts;
    g_.utf8_range(0x20, 0x21, &alts);
    g_.utf8_range(0x23, 0x5B, &alts);
    g_.utf8_range(0x5D, 0x10FFFF, &alts);
    const Symbol hex = g_.bytes(byte_set("0123456789abcdefABCDEF"));
    alts.push_back({g_.choice("json_escape", {{g_.bytes(ByteSet::of('\\')), g_.bytes(byte_set("\"\\/bfnrt"))},
                                              concat({g_.literal("\\u"), {hex, hex, hex, hex}})})});
    return g_.intern("json_char", std::move(alts));
  }
  Symbol json_string() {
    return g_.intern("json_string",
                     {concat({g_.literal("\""), {g_.star("json_chars", {json_char()})}, g_.literal("\"")})});
  }

  // The items after the first j (j >= 1), with the separators before them.
  std::optional<Symbol> tail(const ArraySpec& spec, int j) {
    const int k = static_cast<int>(spec.prefix.size());
    if (j >= k) {
      if (!spec.rest) return j >= spec.min ? std::optional<Symbol>(empty()) : std::nullopt;
      return g_.repeat("more_items", concat({sep(), {spec.rest_value}}), std::max(0, spec.min - j),
                       spec.max < 0 ? -1 : spec.max - j);
    }
    std::vector<Sequence> alts;
    if (j >= spec.min) alts.push_back({});
    if (spec.max < 0 || j + 1 <= spec.max)
      if (const auto t = tail(spec, j + 1)) alts.push_back(concat({sep(), {spec.prefix[j], *t}}));
    if (alts.empty()) return std::nullopt;
    return g_.choice("items", std::move(alts));
  }

  JsonGrammarOptions o_;
  int32_t any_ = -1;
};

}  // namespace
}  // namespace schema

Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options) {
  Grammar g;
  const Symbol value = add_json_value(g, schema, schema, options);
  const int32_t root = g.add_rule("root");
  g.add_alternative(root, {value});
  g.set_root(root);
  g.validate();
  return g;
}

Grammar any_json_grammar(const JsonGrammarOptions& options) {
  JsonGrammarOptions o = options;
  o.strict = false;  // any keys
  return json_schema_grammar({{"type", "object"}}, o);
}

Symbol add_json_value(Grammar& g, const nlohmann::ordered_json& schema, const nlohmann::ordered_json& root,
                      const JsonGrammarOptions& options) {
  schema::JsonEncoding encoding(g, options);
  return schema::walk(encoding, schema, root, options.strict);
}

}  // namespace m3::grammar
