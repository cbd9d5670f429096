// The schema walker both encodings share (json_schema.cc: JSON text; tool_call_grammar.cc: the tool-call
// markup): a schema is flattened into typed alternatives (through $ref, allOf, anyOf / oneOf, type lists,
// enum / const), then each alternative is built by the encoding. Invariants: a $ref'd definition gets one
// rule per alternative, created before its body is built, so recursive schemas terminate; every error names
// the keyword or problem and its JSON pointer; a merged schema (allOf / $ref siblings) lives as long as the
// walk.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace m3::grammar {
namespace schema {
namespace {

// Nesting of schemas (and of $ref chains) a walk follows before refusing: real schemas stay far below it.
constexpr int kMaxDepth = 64;

const std::set<std::string, std::less<>> kAnnotations = {
    "title",      "description", "default",   "examples",         "$schema",         "$id",   "$comment",
    "deprecated", "readOnly",    "writeOnly", "contentMediaType", "contentEncoding", "$defs", "definitions"};
const char* const kObjectKeys[] = {"properties", "required", "additionalProperties", "minProperties",
                                   "maxProperties"};
const char* const kArrayKeys[] = {"items", "prefixItems", "minItems", "maxItems"};
const char* const kStringKeys[] = {"minLength", "maxLength", "pattern", "format"};
const char* const kNumberKeys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const char* const kGeneralKeys[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"};

bool supported(std::string_view key) {
  auto in = [&](const auto& keys) {
    return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
  };
  return in(kObjectKeys) || in(kArrayKeys) || in(kStringKeys) || in(kNumberKeys) || in(kGeneralKeys) ||
         kAnnotations.count(key);
}

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

bool integral(const Json& v) {
  return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// The walker: a schema is first flattened into typed alternatives (through $ref, allOf, anyOf/oneOf, type
// lists, enum/const), then each alternative is built by the encoding.

namespace {

class Walker {
 public:
  Walker(ValueEncoding& enc, const Json& root, bool strict)
      : enc_(enc), g_(enc.grammar()), root_(root), strict_(strict) {}

  Symbol value(const Json& s, const std::string& ptr) {
    if (++depth_ > kMaxDepth) enc_.fail("schema nesting deeper than " + std::to_string(kMaxDepth), ptr);
    const std::vector<Branch> branches = flatten(s, ptr, 0);
    if (branches.empty()) enc_.fail("the schema matches nothing", ptr);
    std::vector<Alternative> alts;
    for (const Branch& b : branches) {
      Alternative a{b.kind, b.node, {}, {}};
      if (b.kind == Kind::kString) a.string = string_spec(*b.node, b.pointer);
      a.symbol = build(b);
      alts.push_back(std::move(a));
    }
    --depth_;
    return enc_.join(alts);
  }

 private:
  struct Branch {
    Kind kind;
    const Json* node;
    std::string pointer;
    const Json* values = nullptr;  // kEnum: the allowed values
    int32_t rule = -1;             // an alternative of a $ref'd definition: its rule, built once
  };

  // Validating keywords of `s` other than `except` (annotations and $defs do not count).
  bool has_constraints(const Json& s, std::string_view except) const {
    for (const auto& [key, v] : s.items())
      if (key != except && !kAnnotations.count(key)) return true;
    return false;
  }

  const Json& keep(Json j) {
    owned_.push_back(std::move(j));
    return owned_.back();
  }

  const Json& resolve(const Json& ref, const std::string& ptr, std::string* target_ptr) {
    if (!ref.is_string()) enc_.fail("$ref must be a string", ptr);
    const std::string& r = ref.get_ref<const std::string&>();
    if (r.empty() || r[0] != '#' || (r.size() > 1 && r[1] != '/'))
      enc_.fail("unsupported $ref '" + r + "' (only local references such as #/$defs/Name)", ptr);
    const Json* target = nullptr;
    try {
      const Json::json_pointer pointer(r.substr(1));
      if (root_.contains(pointer)) target = &root_.at(pointer);
    } catch (const Json::exception&) {  // a malformed pointer resolves to nothing
    }
    if (target == nullptr) enc_.fail("$ref '" + r + "' does not resolve", ptr);
    *target_ptr = r.substr(1);
    return *target;
  }

  // Follows a schema that is only a $ref.
  const Json& deref(const Json& s, std::string* ptr) {
    const Json* cur = &s;
    for (int hop = 0; cur->is_object() && cur->contains("$ref") && !has_constraints(*cur, "$ref"); ++hop) {
      if (hop > kMaxDepth) enc_.fail("$ref chain deeper than " + std::to_string(kMaxDepth), *ptr);
      cur = &resolve((*cur)["$ref"], *ptr, ptr);
    }
    return *cur;
  }

  // `s` (less its combinator `skip`) and `other` must both hold (allOf of one, a $ref or anyOf with
  // siblings): one schema with the keywords of both (the parent's properties first), where they do not
  // conflict.
  const Json& merge(const Json& s, std::string_view skip, const Json& other, const std::string& ptr) {
    if (!other.is_object()) enc_.fail("cannot combine a boolean schema with its siblings", ptr);
    // additionalProperties looks only at its own schema's properties: merged, the other side's would pass as
    // listed ones.
    const auto closes_over = [&](const Json& a, const Json& b) {
      if (!a.contains("additionalProperties") || a["additionalProperties"] == true ||
          !b.contains("properties"))
        return false;
      for (const auto& [name, unused] : b["properties"].items())
        if (!a.contains("properties") || !a["properties"].contains(name)) return true;
      return false;
    };
    if (closes_over(s, other) || closes_over(other, s))
      enc_.fail(
          "additionalProperties beside properties from a combined schema (allOf, $ref) is not supported",
          ptr);
    Json out = Json::object();
    for (const auto& [key, v] : s.items())
      if (key != skip && !kAnnotations.count(key)) out[key] = v;
    for (const auto& [key, v] : other.items()) {
      if (kAnnotations.count(key)) continue;
      if (!out.contains(key)) {
        out[key] = v;
      } else if (key == "required" && v.is_array() && out[key].is_array()) {
        for (const Json& name : v)
          if (std::find(out[key].begin(), out[key].end(), name) == out[key].end()) out[key].push_back(name);
      } else if (key == "properties" && v.is_object() && out[key].is_object()) {
        for (const auto& [name, sub] : v.items()) {
          if (out[key].contains(name) && out[key][name] != sub)
            enc_.fail("conflicting schemas for property '" + name + "' in combined schemas", ptr);
          out[key][name] = sub;
        }
      } else if (out[key] != v) {
        enc_.fail("conflicting '" + key + "' in combined schemas (allOf, $ref or anyOf siblings)", ptr);
      }
    }
    return keep(std::move(out));
  }

  std::vector<Kind> type_kinds(const Json& type, const std::string& ptr) const {
    static const std::map<std::string, Kind, std::less<>> kTypes = {
        {"string", Kind::kString},   {"integer", Kind::kInteger}, {"number", Kind::kNumber},
        {"boolean", Kind::kBoolean}, {"null", Kind::kNull},       {"object", Kind::kObject},
        {"array", Kind::kArray}};
    std::vector<Kind> kinds;
    const Json list = type.is_array() ? type : Json::array({type});
    if (list.empty()) enc_.fail("'type' must not be an empty list", ptr);
    for (const Json& t : list) {
      const auto it = t.is_string() ? kTypes.find(t.get_ref<const std::string&>()) : kTypes.end();
      if (it == kTypes.end()) enc_.fail("unknown type " + t.dump(), ptr);
      if (std::find(kinds.begin(), kinds.end(), it->second) == kinds.end()) kinds.push_back(it->second);
    }
    return kinds;
  }

  // Whether no value can match both alternatives (coarsely: kinds that share no value, or enums without a
  // shared value of the other's kind).
  static bool disjoint(const Branch& a, const Branch& b) {
    if (a.kind == Kind::kAny || b.kind == Kind::kAny) return false;
    if (a.kind == Kind::kEnum && b.kind == Kind::kEnum) {
      for (const Json& v : *a.values)
        if (std::find(b.values->begin(), b.values->end(), v) != b.values->end()) return false;
      return true;
    }
    if (a.kind == Kind::kEnum || b.kind == Kind::kEnum) {
      const Branch& e = a.kind == Kind::kEnum ? a : b;
      const Kind other = a.kind == Kind::kEnum ? b.kind : a.kind;
      return std::none_of(e.values->begin(), e.values->end(),
                          [&](const Json& v) { return has_kind(v, {other}); });
    }
    const auto numeric = [](Kind k) { return k == Kind::kInteger || k == Kind::kNumber; };
    return a.kind != b.kind && !(numeric(a.kind) && numeric(b.kind));
  }

  static bool has_kind(const Json& v, const std::vector<Kind>& kinds) {
    for (Kind k : kinds) {
      if ((k == Kind::kString && v.is_string()) || (k == Kind::kNumber && v.is_number()) ||
          (k == Kind::kBoolean && v.is_boolean()) || (k == Kind::kNull && v.is_null()) ||
          (k == Kind::kObject && v.is_object()) || (k == Kind::kArray && v.is_array()) ||
          (k == Kind::kInteger && integral(v)))
        return true;
    }
    return false;
  }

  std::vector<Branch> flatten(const Json& s, const std::string& ptr, int depth) {
    if (depth > kMaxDepth)
      enc_.fail("schema combinators or $refs nested deeper than " + std::to_string(kMaxDepth), ptr);
    if (s.is_boolean())
      return s.get<bool>() ? std::vector<Branch>{{Kind::kAny, &s, ptr}} : std::vector<Branch>{};
    if (!s.is_object()) enc_.fail("a schema must be an object or a boolean", ptr);
    for (const auto& [key, v] : s.items())
      if (!supported(key)) enc_.fail("unsupported keyword '" + key + "'", ptr);
    if (s.contains("$ref")) {
      std::string target_ptr;
      const Json& target = resolve(s["$ref"], ptr, &target_ptr);
      if (!has_constraints(s, "$ref")) return definition(target, target_ptr, depth + 1);
      return flatten(merge(s, "$ref", deref(target, &target_ptr), ptr), ptr, depth + 1);
    }
    if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) enc_.fail("allOf is supported with exactly one schema", ptr);
      if (!has_constraints(s, "allOf")) return flatten(all[0], ptr + "/allOf/0", depth + 1);
      std::string p = ptr + "/allOf/0";
      return flatten(merge(s, "allOf", deref(all[0], &p), ptr), ptr, depth + 1);
    }
    if (s.contains("anyOf") && s.contains("oneOf"))
      enc_.fail("anyOf together with oneOf is not supported", ptr);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& list = s[key];
      if (!list.is_array() || list.empty()) enc_.fail(std::string(key) + " must be a non-empty array", ptr);
      const bool siblings = has_constraints(s, key);
      std::vector<Branch> out;
      std::vector<size_t> starts;  // where each listed schema's alternatives begin in `out`
      for (size_t i = 0; i < list.size(); ++i) {
        std::string p = ptr + "/" + key + "/" + std::to_string(i);
        std::vector<Branch> part = siblings ? flatten(merge(s, key, deref(list[i], &p), p), p, depth + 1)
                                            : flatten(list[i], p, depth + 1);
        starts.push_back(out.size());
        out.insert(out.end(), part.begin(), part.end());
      }
      starts.push_back(out.size());
      // oneOf = exactly one: a grammar can only take the union, which is exact when no value matches two.
      if (std::string_view(key) == "oneOf")
        for (size_t i = 0; i + 1 < list.size(); ++i)
          for (size_t j = i + 1; j < list.size(); ++j)
            for (size_t a = starts[i]; a < starts[i + 1]; ++a)
              for (size_t b = starts[j]; b < starts[j + 1]; ++b)
                if (!disjoint(out[a], out[b]))
                  enc_.fail("oneOf branches " + std::to_string(i) + " and " + std::to_string(j) +
                                " may both match a value (only disjoint branches are supported: use anyOf)",
                            ptr);
      return out;
    }
    if (s.contains("enum") || s.contains("const")) {  // both: the enum values equal to the const
      Json values = s.contains("enum") ? s["enum"] : Json::array({s["const"]});
      if (!values.is_array() || values.empty()) enc_.fail("enum must be a non-empty array", ptr);
      const std::vector<Kind> kinds = s.contains("type") ? type_kinds(s["type"], ptr) : std::vector<Kind>{};
      const auto excluded = [&](const Json& v) {
        return (s.contains("const") && v != s["const"]) || (!kinds.empty() && !has_kind(v, kinds));
      };
      values.erase(std::remove_if(values.begin(), values.end(), excluded), values.end());
      if (values.empty()) return {};
      return {{Kind::kEnum, &s, ptr, &keep(std::move(values))}};
    }
    std::vector<Kind> kinds;
    if (s.contains("type")) {
      kinds = type_kinds(s["type"], ptr);
    } else {  // no type: the types its keywords constrain, else any value
      auto uses = [&](const auto& keys) {
        return std::any_of(std::begin(keys), std::end(keys), [&](const char* k) { return s.contains(k); });
      };
      if (uses(kObjectKeys)) kinds.push_back(Kind::kObject);
      if (uses(kArrayKeys)) kinds.push_back(Kind::kArray);
      if (uses(kStringKeys)) kinds.push_back(Kind::kString);
      if (uses(kNumberKeys)) kinds.push_back(Kind::kNumber);
      if (kinds.empty()) kinds.push_back(Kind::kAny);
    }
    std::vector<Branch> out;
    for (Kind k : kinds) out.push_back({k, &s, ptr});
    return out;
  }

  std::vector<Branch> definition(const Json& target, const std::string& ptr, int depth) {
    if (const auto it = defs_.find(&target); it != defs_.end()) return it->second;
    if (!resolving_.insert(&target).second)
      enc_.fail("$ref cycle that never reaches an object or array", ptr);
    std::vector<Branch> branches = flatten(target, ptr, depth);
    resolving_.erase(&target);
    const std::string name = "def_" + ptr.substr(ptr.rfind('/') + 1);
    for (Branch& b : branches) b.rule = g_.add_rule(name);
    return defs_[&target] = branches;
  }

  Symbol build(const Branch& b) {
    if (b.rule < 0) return build_body(b);
    if (built_.insert(b.rule).second) g_.add_alternative(b.rule, {build_body(b)});
    return Grammar::ref(b.rule);
  }

  Symbol build_body(const Branch& b) {
    const Json& s = *b.node;
    if (b.kind == Kind::kString) {
      try {
        return enc_.string(string_spec(s, b.pointer));
      } catch (const Error& e) {  // the regex front end's refusal of a pattern, given a place
        if (e.kind() != ErrorKind::kInvalidArgument || !s.contains("pattern")) throw;
        enc_.fail(std::string("pattern: ") + e.what(), b.pointer);
      }
    }
    if (b.kind == Kind::kInteger) return integer(s, b.pointer);
    if (b.kind == Kind::kNumber) return enc_.number(number_sign(s, b.pointer));
    if (b.kind == Kind::kBoolean) return enc_.boolean();
    if (b.kind == Kind::kNull) return enc_.null();
    if (b.kind == Kind::kAny) return enc_.any();
    if (b.kind == Kind::kObject) return object(s, b.pointer);
    if (b.kind == Kind::kArray) return array(s, b.pointer);
    std::vector<Sequence> alts;
    for (const Json& v : *b.values) alts.push_back(enc_.literal(v));
    return g_.choice("enum", std::move(alts));
  }

  // A non-negative integer keyword, or `fallback` when absent; values past int32 are `huge`.
  int64_t count(const Json& s, const char* key, const std::string& ptr, int64_t fallback,
                int64_t huge) const {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!integral(v) || v.get<double>() < 0)
      enc_.fail(std::string("'") + key + "' must be a non-negative integer", ptr);
    return v.get<double>() > 2147483647.0 ? huge : v.get<int64_t>();
  }

  StringSpec string_spec(const Json& s, const std::string& ptr) const {
    StringSpec spec;
    spec.min_length = static_cast<int>(count(s, "minLength", ptr, 0, -2));
    spec.max_length = static_cast<int>(count(s, "maxLength", ptr, -1, -1));
    if (spec.min_length == -2) enc_.fail("minLength is too large", ptr);
    if (spec.max_length >= 0 && spec.min_length > spec.max_length)
      enc_.fail("minLength > maxLength matches nothing", ptr);
    if (s.contains("pattern") && s.contains("format"))
      enc_.fail("pattern together with format is not supported", ptr);
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) enc_.fail("'pattern' must be a string", ptr);
      spec.regex = s["pattern"].get<std::string>();
    }
    if (s.contains("format")) {
      const Json& f = s["format"];
      if (!f.is_string() || (spec.regex = format_regex(f.get<std::string>())).empty())
        enc_.fail("unsupported format " + f.dump(), ptr);
    }
    if (!spec.regex.empty() && (spec.min_length > 0 || spec.max_length >= 0))
      enc_.fail("minLength/maxLength together with pattern or format is not supported", ptr);
    return spec;
  }

  // floor (or ceil) of a numeric keyword, clamped far outside every encoding's integer range.
  Int128 rounded(const Json& v, bool up, const char* key, const std::string& ptr) const {
    if (!v.is_number()) enc_.fail(std::string("'") + key + "' must be a number", ptr);
    if (v.is_number_unsigned()) return static_cast<Int128>(v.get<uint64_t>());
    if (v.is_number_integer()) return static_cast<Int128>(v.get<int64_t>());
    const double d = std::clamp(v.get<double>(), -1e30, 1e30);
    return static_cast<Int128>(up ? std::ceil(d) : std::floor(d));
  }

  // Bounds as integers: the least integer above an exclusive minimum is floor(x) + 1, at or above an
  // inclusive one ceil(x); a boolean exclusiveMinimum/Maximum (draft 4) makes minimum/maximum exclusive.
  Symbol integer(const Json& s, const std::string& ptr) {
    Int128 lo = enc_.int_min(), hi = enc_.int_max();
    const auto flag = [&](const char* key) {
      return s.contains(key) && s[key].is_boolean() && s[key].get<bool>();
    };
    const auto bound = [&](const char* key, bool exclusive, bool lower) {
      const Int128 v = rounded(s[key], lower != exclusive, key, ptr);
      return exclusive ? (lower ? v + 1 : v - 1) : v;
    };
    if (s.contains("minimum")) lo = std::max(lo, bound("minimum", flag("exclusiveMinimum"), true));
    if (s.contains("maximum")) hi = std::min(hi, bound("maximum", flag("exclusiveMaximum"), false));
    if (s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean())
      lo = std::max(lo, bound("exclusiveMinimum", true, true));
    if (s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean())
      hi = std::min(hi, bound("exclusiveMaximum", true, false));
    if (lo > hi) enc_.fail("integer bounds leave no value that can be written", ptr);
    return enc_.integer(lo, hi);
  }

  // Number bounds: only "non-negative" and "positive" are exact without a decimal comparison grammar.
  NumberSign number_sign(const Json& s, const std::string& ptr) const {
    const auto is = [&](std::string_view key, const Json& v) {
      return s.contains(key) && s[std::string(key)] == v &&
             s[std::string(key)].is_boolean() == v.is_boolean();
    };
    const bool min0 = is("minimum", 0),
               positive = is("exclusiveMinimum", 0) || (min0 && is("exclusiveMinimum", true));
    for (std::string_view key : kNumberKeys) {
      const bool ok = !s.contains(key) || (key == "minimum" && min0) ||
                      (key == "exclusiveMinimum" && (positive || is(key, false))) ||
                      (key == "exclusiveMaximum" && is(key, false));
      if (!ok)
        enc_.fail("number bounds other than minimum 0 / exclusiveMinimum 0 are not supported ('" +
                      std::string(key) + "')",
                  ptr);
    }
    return positive ? NumberSign::kPositive : min0 ? NumberSign::kNonNegative : NumberSign::kAny;
  }

  Symbol object(const Json& s, const std::string& ptr) {
    ObjectSpec spec;
    spec.pointer = ptr;
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) enc_.fail("'properties' must be an object", ptr);
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) enc_.fail("'required' must be an array of strings", ptr);
      for (const Json& name : s["required"]) {
        if (!name.is_string()) enc_.fail("'required' must be an array of strings", ptr);
        if (std::find(required.begin(), required.end(), name) == required.end()) required.push_back(name);
      }
    }
    const Json extra = s.contains("additionalProperties") ? s["additionalProperties"] : Json(!strict_);
    spec.extra = !(extra.is_boolean() && !extra.get<bool>());
    if (spec.extra) spec.extra_value = value(extra, ptr + "/additionalProperties");
    for (const auto& [name, sub] : props.items()) {
      const bool req = std::find(required.begin(), required.end(), name) != required.end();
      if (sub == false && !req) continue;  // a property that may not appear
      const bool null_only = sub.is_object() && sub.contains("type") &&
                             (sub["type"] == "null" || sub["type"] == Json::array({"null"}));
      spec.properties.push_back(
          {name, value(sub, ptr + "/properties/" + pointer_token(name)), req, null_only});
    }
    for (const auto& [name, unused] : props.items()) spec.listed_keys.push_back(name);
    for (const std::string& name : required) {
      if (props.contains(name)) continue;
      spec.listed_keys.push_back(name);
      if (!spec.extra)
        enc_.fail("required property '" + name + "' is not allowed by additionalProperties", ptr);
      spec.properties.push_back({name, spec.extra_value, true, false});
    }
    const int64_t min_props = count(s, "minProperties", ptr, 0, INT64_MAX);
    const int64_t max_props = count(s, "maxProperties", ptr, -1, -1);
    if (min_props > static_cast<int64_t>(required.size()))
      enc_.fail("minProperties above the number of required properties is not supported", ptr);
    if (max_props >= 0 && (spec.extra || max_props < static_cast<int64_t>(spec.properties.size())))
      enc_.fail("maxProperties below the number of possible properties is not supported", ptr);
    return enc_.object(spec);
  }

  Symbol array(const Json& s, const std::string& ptr) {
    ArraySpec spec;
    if (s.contains("prefixItems")) {
      const Json& prefix = s["prefixItems"];
      if (!prefix.is_array()) enc_.fail("'prefixItems' must be an array of schemas", ptr);
      if (!prefix.empty() && !enc_.supports_prefix_items())
        enc_.fail(
            "prefixItems is not supported in tool-call markup (the parser reads every <item> with 'items')",
            ptr);
      for (size_t i = 0; i < prefix.size(); ++i)
        spec.prefix.push_back(value(prefix[i], ptr + "/prefixItems/" + std::to_string(i)));
    }
    const Json items = s.contains("items") ? s["items"] : Json(true);
    if (items.is_array()) enc_.fail("'items' as an array (a tuple) is not supported; use prefixItems", ptr);
    spec.rest = !(items.is_boolean() && !items.get<bool>());
    if (spec.rest) spec.rest_value = value(items, ptr + "/items");
    spec.min = static_cast<int>(count(s, "minItems", ptr, 0, -2));
    spec.max = static_cast<int>(count(s, "maxItems", ptr, -1, -1));
    if (spec.min == -2) enc_.fail("minItems is too large", ptr);
    if (spec.max >= 0 && spec.min > spec.max) enc_.fail("minItems > maxItems matches nothing", ptr);
    if (!spec.rest) {
      const int k = static_cast<int>(spec.prefix.size());
      if (spec.min > k)
        enc_.fail("minItems above the number of prefixItems (items false) matches nothing", ptr);
      spec.max = spec.max < 0 ? k : std::min(spec.max, k);
    }
    return enc_.array(spec);
  }

  ValueEncoding& enc_;
  Grammar& g_;
  const Json& root_;
  bool strict_;
  int depth_ = 0;
  std::deque<Json> owned_;  // merged schemas and enum value lists: stable addresses
  std::map<const Json*, std::vector<Branch>> defs_;
  std::set<const Json*> resolving_;
  std::set<int32_t> built_;
};

}  // namespace

Symbol walk(ValueEncoding& encoding, const Json& schema, const Json& root, bool strict) {
  return Walker(encoding, root, strict).value(schema, "");
}

Sequence concat(std::initializer_list<Sequence> parts) {
  Sequence out;
  for (const Sequence& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string json_text(const Json& value, bool python_style) {
  const char* comma = python_style ? ", " : ",";
  std::string out;
  if (value.is_object()) {
    out += '{';
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it != value.begin()) out += comma;
      out += json_text(Json(it.key()), python_style) + (python_style ? ": " : ":") +
             json_text(*it, python_style);
    }
    return out + '}';
  }
  if (value.is_array()) {
    out += '[';
    for (size_t i = 0; i < value.size(); ++i) out += (i ? comma : "") + json_text(value[i], python_style);
    return out + ']';
  }
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string format_regex(const std::string& format) {
  static const std::string kDate = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  static const std::string kTime =
      "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  static const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  static const std::string kIpv4 = "(" + kOctet + "\\.){3}" + kOctet;
  static const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return kDate + "[Tt]" + kTime;
  if (format == "email")
    return "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@" + kLabel + "(\\." +
           kLabel + ")*";
  if (format == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (format == "ipv4") return kIpv4;
  if (format == "hostname") return kLabel + "(\\." + kLabel + ")*";
  if (format == "uri") return "[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9._~:/?#@!$&'()*+,;=%\\[\\]-]*";
  if (format == "ipv6") {
    // RFC 4291 text forms: 8 groups, or a "::" with a groups before and at most 7 - a after; with an IPv4
    // tail (two groups' worth), 6 groups or a "::" with at most 5 groups around it.
    const std::string h = "[0-9a-fA-F]{1,4}";
    auto groups = [&](int n) {
      return n == 0 ? std::string() : h + (n > 1 ? "(:" + h + "){" + std::to_string(n - 1) + "}" : "");
    };
    auto upto = [&](int n) {
      return n == 0 ? std::string() : "(" + h + "(:" + h + "){0," + std::to_string(n - 1) + "})?";
    };
    std::string re = "(" + h + ":){7}" + h + "|(" + h + ":){6}" + kIpv4;
    for (int a = 0; a <= 7; ++a) re += "|" + groups(a) + "::" + upto(7 - a);
    for (int a = 0; a <= 5; ++a)
      re += "|" + groups(a) + "::(" + h + ":){0," + std::to_string(5 - a) + "}" + kIpv4;
    return re;
  }
  return "";
}

}  // namespace schema
}  // namespace m3::grammar
