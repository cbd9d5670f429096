// Schema-typed conversion of tool-call parameter text (serving-api.md §4.2) and the JSON writer. Invariants:
// no exceptions escape (schemas come from clients, text from the model), recursion is bounded, output is
// json.dumps style so argument strings match what Python peers produce for the same call.
#include "chat/parsers/tool_schema.h"

#include "common/ascii.h"
#include "common/json_escape.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <system_error>
#include <unordered_map>

namespace m3::tool_schema {
namespace {

using nlohmann::json;

// Bounds for client-supplied schemas: "$ref" chains, anyOf nesting and the number of alternatives collected
// are all capped so a self-referential schema cannot loop or blow up.
constexpr int kMaxSchemaDepth = 16;
constexpr size_t kMaxAlternatives = 64;
// JSON text found inside a parameter is re-serialized by a recursive-free SAX writer; deeper nesting than
// this is not accepted as JSON (the value then stays a string).
constexpr size_t kMaxJsonDepth = 128;

enum class Kind { kString, kInteger, kNumber, kBoolean, kNull, kArray, kObject, kEnum };

struct Alt {
  Kind kind;
  Schema schema;  // the (resolved) schema object this alternative came from
};

const json* member(const json* obj, const char* key) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &*it;
}

// Follows a local JSON pointer ("#", "#/$defs/Addr"). Remote refs are not fetched: they resolve to nothing.
const json* follow_pointer(const json* root, const std::string& ref) {
  if (root == nullptr || ref.empty() || ref[0] != '#') return nullptr;
  const json* cur = root;
  size_t pos = 1;
  while (pos < ref.size()) {
    if (ref[pos] != '/') return nullptr;
    size_t next = ref.find('/', pos + 1);
    if (next == std::string::npos) next = ref.size();
    std::string token;
    for (size_t i = pos + 1; i < next; ++i) {
      if (ref[i] == '~' && i + 1 < next && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
        token += ref[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += ref[i];
      }
    }
    if (cur->is_object()) {
      auto it = cur->find(token);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array()) {
      size_t index = 0;
      auto [p, ec] = std::from_chars(token.data(), token.data() + token.size(), index);
      if (ec != std::errc() || p != token.data() + token.size() || index >= cur->size()) return nullptr;
      cur = &(*cur)[index];
    } else {
      return nullptr;
    }
    pos = next;
  }
  return cur;
}

const json* resolve(Schema s) {
  const json* node = s.node;
  for (int hop = 0; node != nullptr && node->is_object(); ++hop) {
    const json* ref = member(node, "$ref");
    if (ref == nullptr || !ref->is_string()) return node;
    if (hop >= kMaxSchemaDepth) return nullptr;
    node = follow_pointer(s.root, ref->get_ref<const std::string&>());
  }
  return node;
}

void add_type(std::vector<Alt>& out, const std::string& type, Schema schema) {
  static const std::pair<const char*, Kind> kTypes[] = {
      {"string", Kind::kString},   {"integer", Kind::kInteger}, {"number", Kind::kNumber},
      {"boolean", Kind::kBoolean}, {"null", Kind::kNull},       {"array", Kind::kArray},
      {"object", Kind::kObject}};
  for (const auto& [name, kind] : kTypes) {
    if (type == name && out.size() < kMaxAlternatives) out.push_back({kind, schema});
  }
}

// The ordered list of types a value may take (§4.2: "try the alternatives in order").
void collect(Schema s, std::vector<Alt>& out, int depth) {
  const json* node = resolve(s);
  if (node == nullptr || !node->is_object() || depth > kMaxSchemaDepth || out.size() >= kMaxAlternatives)
    return;
  Schema here{node, s.root};
  if (const json* type = member(node, "type")) {
    if (type->is_string()) add_type(out, type->get_ref<const std::string&>(), here);
    if (type->is_array()) {
      for (const auto& t : *type) {
        if (t.is_string()) add_type(out, t.get_ref<const std::string&>(), here);
      }
    }
    return;
  }
  bool composed = false;
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    const json* branches = member(node, key);
    if (branches == nullptr || !branches->is_array()) continue;
    composed = true;
    for (const auto& branch : *branches) collect({&branch, s.root}, out, depth + 1);
  }
  if (composed) return;
  if (member(node, "enum") != nullptr || member(node, "const") != nullptr) {
    out.push_back({Kind::kEnum, here});
  } else if (member(node, "properties") != nullptr) {
    out.push_back({Kind::kObject, here});
  } else if (member(node, "items") != nullptr) {
    out.push_back({Kind::kArray, here});
  }
}

std::vector<Alt> alternatives(Schema s) {
  std::vector<Alt> out;
  collect(s, out, 0);
  return out;
}

const Alt* first_container(const std::vector<Alt>& alts) {
  for (const auto& a : alts) {
    if (a.kind == Kind::kArray || a.kind == Kind::kObject) return &a;
  }
  return nullptr;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// Python int() semantics minus underscores: optional sign, decimal digits, leading zeros allowed ("018956").
bool parse_int(std::string_view t, int64_t& value) {
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty() || (t.front() == '-' && t.size() == 1)) return false;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  return ec == std::errc() && p == t.data() + t.size();
}

bool all_digits(std::string_view s) {
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// Decimal float syntax only: from_chars alone would also take "inf", "nan" and hex floats.
bool looks_like_decimal(std::string_view t) {
  if (!t.empty() && (t.front() == '+' || t.front() == '-')) t.remove_prefix(1);
  size_t e = t.find_first_of("eE");
  std::string_view mant = t.substr(0, e);
  if (e != std::string_view::npos) {
    std::string_view exp = t.substr(e + 1);
    if (!exp.empty() && (exp.front() == '+' || exp.front() == '-')) exp.remove_prefix(1);
    if (exp.empty() || !all_digits(exp)) return false;
  }
  size_t dot = mant.find('.');
  std::string_view whole = mant.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : mant.substr(dot + 1);
  return all_digits(whole) && all_digits(frac) && (!whole.empty() || !frac.empty());
}

bool append_number(std::string& out, std::string_view t) {
  int64_t i = 0;
  if (parse_int(t, i)) {
    out += std::to_string(i);
    return true;
  }
  if (!looks_like_decimal(t)) return false;
  if (t.front() == '+') t.remove_prefix(1);
  double d = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
  if (ec != std::errc() || p != t.data() + t.size() || !std::isfinite(d)) return false;
  out += json(d).dump();
  return true;
}

bool parse_bool(std::string_view t, bool& value) {
  if (iequals(t, "true") || t == "1") {
    value = true;
    return true;
  }
  if (iequals(t, "false") || t == "0") {
    value = false;
    return true;
  }
  return false;
}

// Re-serializes JSON text through nlohmann's SAX parser, so key order and duplicates survive and no DOM (with
// its quadratic ordered-map inserts) is built.
class JsonRewriter : public nlohmann::json_sax<json> {
 public:
  explicit JsonRewriter(std::string& out) : out_(out) {}
  bool null() override { return scalar("null"); }
  bool boolean(bool v) override { return scalar(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return scalar(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(std::to_string(v)); }
  bool number_float(number_float_t v, const string_t&) override { return scalar(json(v).dump()); }
  bool string(string_t& v) override {
    before_value();
    append_json_string(out_, v);
    return true;
  }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open('{'); }
  bool key(string_t& k) override {
    if (!first_.back()) out_ += ", ";
    first_.back() = false;
    append_json_string(out_, k);
    out_ += ": ";
    after_key_ = true;
    return true;
  }
  bool end_object() override { return close('}'); }
  bool start_array(std::size_t) override { return open('['); }
  bool end_array() override { return close(']'); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  void before_value() {
    if (after_key_) {
      after_key_ = false;
    } else if (!first_.empty()) {
      if (!first_.back()) out_ += ", ";
      first_.back() = false;
    }
  }
  bool scalar(const std::string& text) {
    before_value();
    out_ += text;
    return true;
  }
  bool open(char c) {
    before_value();
    if (first_.size() >= kMaxJsonDepth) return false;
    out_ += c;
    first_.push_back(true);
    return true;
  }
  bool close(char c) {
    out_ += c;
    first_.pop_back();
    return true;
  }

  std::string& out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

// `t` (trimmed) as JSON of the wanted container kind, or false.
bool append_json_text(std::string& out, std::string_view t, Kind kind) {
  if (t.empty() || t.front() != (kind == Kind::kArray ? '[' : '{')) return false;
  std::string tmp;
  JsonRewriter writer(tmp);
  bool ok = false;
  try {
    ok = json::sax_parse(t.begin(), t.end(), &writer);
  } catch (...) {  // sax_parse reports through parse_error; this only guards against a library surprise
    ok = false;
  }
  if (!ok) return false;
  out += tmp;
  return true;
}

bool append_enum(std::string& out, std::string_view raw, std::string_view t, Schema schema) {
  const json* node = schema.node;
  const json* values = member(node, "enum");
  json single;
  if (values == nullptr || !values->is_array()) {
    const json* c = member(node, "const");
    if (c == nullptr) return false;
    single = json::array({*c});
    values = &single;
  }
  for (const auto& v : *values) {
    if (v.is_string() && (v.get_ref<const std::string&>() == raw || v.get_ref<const std::string&>() == t)) {
      append_json_string(out, v.get_ref<const std::string&>());
      return true;
    }
  }
  std::string tmp;
  for (const auto& v : *values) {
    if (v.is_string()) continue;
    tmp.clear();
    append_json_value(tmp, v);
    if (tmp == t) {
      out += tmp;
      return true;
    }
  }
  return false;
}

void convert_leaf(std::string& out, const std::string& text, const std::vector<Alt>& alts) {
  std::string_view t = ascii_trim(text);
  bool null_ok = false;
  for (const auto& a : alts) null_ok = null_ok || a.kind == Kind::kNull;
  // The template omits null arguments, so a literal "null" is only taken as null where the schema allows it.
  if (null_ok && (iequals(t, "null") || iequals(t, "none"))) {
    out += "null";
    return;
  }
  for (const auto& a : alts) {
    switch (a.kind) {
      case Kind::kString:
        append_json_string(out, text);
        return;
      case Kind::kInteger: {
        int64_t v = 0;
        if (parse_int(t, v)) {
          out += std::to_string(v);
          return;
        }
        break;
      }
      case Kind::kNumber:
        if (append_number(out, t)) return;
        break;
      case Kind::kBoolean: {
        bool b = false;
        if (parse_bool(t, b)) {
          out += b ? "true" : "false";
          return;
        }
        break;
      }
      case Kind::kNull:
        break;
      case Kind::kArray:
      case Kind::kObject:
        // An empty container renders as an element with no children (template to_xml of [] / {}).
        if (t.empty()) {
          out += a.kind == Kind::kArray ? "[]" : "{}";
          return;
        }
        if (append_json_text(out, t, a.kind)) return;
        break;
      case Kind::kEnum:
        if (append_enum(out, text, t, a.schema)) return;
        break;
    }
  }
  // Nothing matched (or no schema): keep the model's text rather than invent a value.
  append_json_string(out, text);
}

void convert(std::string& out, const XmlNode& node, Schema schema);

void convert_tree(std::string& out, const XmlNode& node, Schema schema, const std::vector<Alt>& alts) {
  const Alt* container = first_container(alts);
  bool as_array = false;
  if (container != nullptr) {
    as_array = container->kind == Kind::kArray;
  } else {
    as_array = true;
    for (const auto& child : node.children) as_array = as_array && child.name == "item";
  }
  if (as_array) {
    Schema items = container != nullptr ? child_schema(schema, "item") : Schema{};
    out += '[';
    for (size_t i = 0; i < node.children.size(); ++i) {
      if (i > 0) out += ", ";
      convert(out, node.children[i], items);
    }
    out += ']';
    return;
  }
  // Repeated sibling tags become a list under one key, at the key's first position.
  std::unordered_map<std::string_view, std::vector<size_t>> groups;
  std::vector<std::string_view> order;
  for (size_t i = 0; i < node.children.size(); ++i) {
    auto [it, inserted] = groups.try_emplace(node.children[i].name);
    if (inserted) order.push_back(node.children[i].name);
    it->second.push_back(i);
  }
  out += '{';
  bool first = true;
  for (std::string_view name : order) {
    if (!first) out += ", ";
    first = false;
    append_json_string(out, name);
    out += ": ";
    Schema sub = container != nullptr ? child_schema(schema, name) : Schema{};
    const auto& idx = groups[name];
    if (idx.size() == 1) {
      convert(out, node.children[idx[0]], sub);
      continue;
    }
    out += '[';
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) out += ", ";
      convert(out, node.children[idx[k]], sub);
    }
    out += ']';
  }
  if (!ascii_trim(node.text).empty()) {
    std::string key = "$text";
    while (groups.count(key) != 0) key.insert(key.begin(), '$');
    if (!first) out += ", ";
    append_json_string(out, key);
    out += ": ";
    append_json_string(out, node.text);
  }
  out += '}';
}

void convert(std::string& out, const XmlNode& node, Schema schema) {
  std::vector<Alt> alts = alternatives(schema);
  if (node.children.empty()) {
    convert_leaf(out, node.text, alts);
  } else {
    convert_tree(out, node, schema, alts);
  }
}

}  // namespace

Schema child_schema(Schema parent, std::string_view name) {
  std::vector<Alt> alts = alternatives(parent);
  const Alt* container = first_container(alts);
  if (container == nullptr) return {};
  if (container->kind == Kind::kArray) {
    const json* items = member(container->schema.node, "items");
    return items != nullptr && items->is_object() ? Schema{items, parent.root} : Schema{};
  }
  // Any object branch may declare the property (anyOf of several object shapes).
  std::string key(name);
  for (const auto& a : alts) {
    if (a.kind != Kind::kObject) continue;
    const json* props = member(a.schema.node, "properties");
    if (const json* p = member(props, key.c_str())) return {p, parent.root};
  }
  for (const auto& a : alts) {
    if (a.kind != Kind::kObject) continue;
    const json* extra = member(a.schema.node, "additionalProperties");
    if (extra != nullptr && extra->is_object()) return {extra, parent.root};
  }
  return {};
}

bool is_verbatim_string(Schema schema) {
  std::vector<Alt> alts = alternatives(schema);
  if (alts.empty() || alts.front().kind != Kind::kString) return false;
  for (const auto& a : alts) {
    if (a.kind == Kind::kNull) return false;
  }
  return true;
}

bool accepts_children(Schema schema) {
  std::vector<Alt> alts = alternatives(schema);
  return alts.empty() || first_container(alts) != nullptr;
}

void append_converted(std::string& out, const XmlNode& node, Schema schema) {
  convert(out, node, schema);
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  append_json_escaped(out, s);
  out += '"';
}

void append_json_value(std::string& out, const nlohmann::json& value) {
  switch (value.type()) {
    case json::value_t::string:
      append_json_string(out, value.get_ref<const std::string&>());
      return;
    case json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& v : value) {
        if (!first) out += ", ";
        first = false;
        append_json_value(out, v);
      }
      out += ']';
      return;
    }
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_json_string(out, k);
        out += ": ";
        append_json_value(out, v);
      }
      out += '}';
      return;
    }
    case json::value_t::boolean:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      out += value.dump();
      return;
    default:
      out += "null";
  }
}

}  // namespace m3::tool_schema
