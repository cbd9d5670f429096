// Value semantics (see value.h): Python str/repr/==/< and json.dumps over Jinja values. Recursive walks are
// depth-capped and output-producing walks charge the Heap as they grow, so a template-built deep or
// exponentially shared structure raises a TemplateError instead of exhausting the stack or memory.
#include "chat/template/value.h"

#include "common/json_escape.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/template/text_util.h"

namespace m3::jinja {

namespace {
constexpr int kMaxValueDepth = 256;
thread_local Heap* g_heap = nullptr;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) raise("value nesting is too deep (more than 256 levels)");
}
}  // namespace

TemplateError::TemplateError(const std::string& message, int line, bool user_raised)
    : m3::Error(m3::ErrorKind::kInvalidArgument,
                user_raised ? message
                            : "chat template error" +
                                  (line > 0 ? " (line " + std::to_string(line) + ")" : "") + ": " + message),
      bare_(message),
      line_(line),
      user_raised_(user_raised) {}

void raise(const std::string& message) {
  throw TemplateError(message);
}

// ---- Heap ----

Heap::Heap(size_t alloc_budget) : budget_(alloc_budget), previous_(g_heap) {
  g_heap = this;
}

Heap::~Heap() {
  g_heap = previous_;
  // Hold every live object first so that clearing one cannot trigger a (recursive) destruction of another.
  std::vector<std::shared_ptr<HeapObject>> alive;
  alive.reserve(objects_.size());
  for (auto& w : objects_)
    if (auto p = w.lock()) alive.push_back(std::move(p));
  for (auto& p : alive) p->clear_refs();
}

void Heap::track(const std::shared_ptr<HeapObject>& obj) {
  if (objects_.size() >= compact_at_) {
    std::erase_if(objects_, [](const std::weak_ptr<HeapObject>& w) { return w.expired(); });
    compact_at_ = std::max<size_t>(1024, objects_.size() * 2);
  }
  objects_.emplace_back(obj);
}

void Heap::charge(size_t bytes) {
  used_ += bytes;
  if (used_ > budget_ || bytes > budget_)
    raise("template exceeded its memory budget (" + std::to_string(budget_ >> 20) + " MiB)");
}

Heap* Heap::current() {
  return g_heap;
}

void charge(size_t bytes) {
  if (g_heap) g_heap->charge(bytes);
}

// ---- Value ----

namespace {
template <typename T>
std::shared_ptr<T> make_tracked() {
  auto p = std::make_shared<T>();
  if (g_heap) g_heap->track(p);
  return p;
}
}  // namespace

Value Value::undefined(std::string message) {
  Value v;
  if (!message.empty()) v.str_ = std::make_shared<const std::string>(std::move(message));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.str_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  auto p = make_tracked<ListData>();
  p->items = std::move(items);
  v.obj_ = std::move(p);
  return v;
}
Value Value::list(std::vector<Value> items, Flavor flavor) {
  Value v = list(std::move(items));
  static_cast<ListData&>(*v.obj_).flavor = flavor;
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.obj_ = make_tracked<DictData>();
  return v;
}
Value Value::namespace_object() {
  Value v = dict();
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::object(std::shared_ptr<Object> obj) {
  Value v;
  v.kind_ = Kind::kObject;
  if (g_heap) g_heap->track(obj);
  v.obj_ = std::move(obj);
  return v;
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::kBool:
      return b_ ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(i_);
    case Kind::kFloat:
      return f_;
    default:
      return 0.0;
  }
}

std::string Value::undefined_message() const {
  return str_ ? *str_ : std::string("value is undefined");
}
std::vector<Value>& Value::items() const {
  return static_cast<ListData&>(*obj_).items;
}
Flavor Value::flavor() const {
  return kind_ == Kind::kList ? static_cast<const ListData&>(*obj_).flavor : Flavor::kList;
}
DictData& Value::dict_data() const {
  return static_cast<DictData&>(*obj_);
}
Object& Value::obj() const {
  return static_cast<Object&>(*obj_);
}

Value Object::call(Evaluator&, CallArgs&) {
  raise("'" + type_name() + "' object is not callable");
}

// ---- DictData ----

const Value* DictData::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* DictData::find(std::string_view key) const {
  std::string k;
  k.reserve(key.size() + 1);
  k += 's';
  k += key;
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void DictData::set(const Value& key, Value value) {
  auto [it, inserted] = index_.try_emplace(hash_key(key), entries_.size());
  if (inserted) {
    entries_.emplace_back(key, std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

bool DictData::erase(const Value& key) {
  auto it = index_.find(hash_key(key));
  if (it == index_.end()) return false;
  size_t pos = it->second;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(pos));
  index_.erase(it);
  for (auto& [k, p] : index_)
    if (p > pos) --p;
  return true;
}

void DictData::clear_refs() {
  std::vector<Value> values;
  values.reserve(entries_.size() * 2);
  for (auto& [k, v] : entries_) {
    values.push_back(std::move(k));
    values.push_back(std::move(v));
  }
  entries_.clear();
  index_.clear();
  release_deep(values);
}

namespace {
// Objects whose last reference was dropped while another container was being freed; drained by the outermost
// release_deep call so that destruction depth stays constant.
thread_local std::vector<std::shared_ptr<HeapObject>>* g_graveyard = nullptr;
}  // namespace

void release_deep(std::vector<Value>& values) {
  std::vector<std::shared_ptr<HeapObject>> local;
  bool outermost = g_graveyard == nullptr;
  if (outermost) g_graveyard = &local;
  for (auto& v : values)
    if (v.obj_) g_graveyard->push_back(std::move(v.obj_));
  values.clear();
  if (!outermost) return;
  while (!local.empty()) {
    std::shared_ptr<HeapObject> next = std::move(local.back());
    local.pop_back();
    next.reset();  // may append this object's children to `local`
  }
  g_graveyard = nullptr;
}

// ---- Python semantics ----

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.as_bool();
    case Kind::kInt:
      return v.as_int() != 0;
    case Kind::kFloat:
      return v.as_double() != 0.0;
    case Kind::kString:
      return !v.str().empty();
    case Kind::kList:
    case Kind::kTuple:
      return v.is_lazy() || !v.items().empty();
    case Kind::kDict:
      return v.dict_data().size() != 0;
    case Kind::kNamespace:
    case Kind::kObject:
      return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (v.flavor()) {
        case Flavor::kGenerator:
          return "generator";
        case Flavor::kIterator:
          return "list_reverseiterator";
        case Flavor::kDictItems:
          return "dict_items";
        case Flavor::kDictKeys:
          return "dict_keys";
        case Flavor::kDictValues:
          return "dict_values";
        default:
          return "list";
      }
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kObject:
      return v.obj().type_name();
  }
  return "object";
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

namespace {
// Shared sub-structures can make a printed form exponentially larger than the value itself, so producers of
// text charge the heap as they grow instead of after the fact.
struct Sink {
  std::string out;
  size_t charged = 0;
  void grew() {
    if (out.size() - charged > (1u << 16)) {
      charge(out.size() - charged);
      charged = out.size();
    }
  }
  void finish() { charge(out.size() - charged); }
};

// Comparisons walk shared sub-structures once per reference; this bounds the walk.
struct WorkMeter {
  size_t n = 0;
  void tick() {
    if (++n > 20'000'000) raise("value comparison is too expensive");
  }
};

void repr_into(Sink& out, const Value& v, int depth);

void seq_repr(Sink& sink, const Value& v, int depth) {
  std::string& out = sink.out;
  const auto& items = v.items();
  out += v.is_tuple() ? '(' : '[';
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += ", ";
    repr_into(sink, items[k], depth + 1);
  }
  if (v.is_tuple() && items.size() == 1) out += ',';
  out += v.is_tuple() ? ')' : ']';
}

void dict_repr(Sink& sink, const DictData& d, int depth) {
  std::string& out = sink.out;
  out += '{';
  bool first = true;
  for (const auto& [k, val] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    repr_into(sink, k, depth + 1);
    out += ": ";
    repr_into(sink, val, depth + 1);
  }
  out += '}';
}

void repr_into(Sink& sink, const Value& v, int depth) {
  check_depth(depth);
  sink.grew();
  std::string& out = sink.out;
  switch (v.kind()) {
    case Kind::kUndefined:
      out += "Undefined";
      return;
    case Kind::kString:
      out += text::repr(v.str());
      return;
    case Kind::kList:
    case Kind::kTuple:
      if (v.is_lazy()) {
        out += "<" + type_name(v) + " object>";  // CPython adds an address, which no golden can contain
      } else if (v.flavor() != Flavor::kList) {
        out += type_name(v) + "(";
        seq_repr(sink, v, depth);
        sink.out += ')';
      } else {
        seq_repr(sink, v, depth);
      }
      return;
    case Kind::kDict:
      dict_repr(sink, v.dict_data(), depth);
      return;
    case Kind::kNamespace:
      out += "<Namespace ";
      dict_repr(sink, v.dict_data(), depth);
      out += '>';
      return;
    default:
      out += to_str(v);
      return;
  }
}
}  // namespace

std::string repr(const Value& v) {
  Sink sink;
  repr_into(sink, v, 0);
  sink.finish();
  return std::move(sink.out);
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(v.as_int());
    case Kind::kFloat:
      return text::float_repr(v.as_double());
    case Kind::kString:
      return v.str();
    case Kind::kObject:
      return v.obj().repr();
    default:
      return repr(v);
  }
}

namespace {
bool equals_at(const Value& a, const Value& b, int depth, WorkMeter& work) {
  check_depth(depth);
  work.tick();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList:
    case Kind::kTuple: {
      if (a.is_lazy() || b.is_lazy()) return a.identity() == b.identity();
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (!equals_at(x[k], y[k], depth + 1, work)) return false;
      return true;
    }
    case Kind::kDict: {
      const auto& x = a.dict_data();
      const auto& y = b.dict_data();
      if (x.size() != y.size()) return false;
      for (const auto& [k, val] : x.entries()) {
        const Value* other = y.find(k);
        if (!other || !equals_at(val, *other, depth + 1, work)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare_at(const Value& a, const Value& b, const char* op, int depth, WorkMeter& work) {
  check_depth(depth);
  work.tick();
  if (a.is_undefined()) raise(a.undefined_message());
  if (b.is_undefined()) raise(b.undefined_message());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equals_at(x[k], y[k], depth + 1, work)) continue;
      return compare_at(x[k], y[k], op, depth + 1, work);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  raise(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
        type_name(b) + "'");
}
}  // namespace

bool equals(const Value& a, const Value& b) {
  WorkMeter work;
  return equals_at(a, b, 0, work);
}
int compare(const Value& a, const Value& b, const char* op) {
  WorkMeter work;
  return compare_at(a, b, op, 0, work);
}

namespace {
std::string hash_key_at(const Value& v, int depth);
}  // namespace

std::string hash_key(const Value& v) {
  return hash_key_at(v, 0);
}

namespace {
std::string hash_key_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Kind::kString: {
      std::string k;
      k.reserve(v.str().size() + 1);
      k += 's';
      k += v.str();
      return k;
    }
    case Kind::kBool:
    case Kind::kInt:
      return "i" + std::to_string(v.as_int());
    case Kind::kFloat: {
      double d = v.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return "i" + std::to_string(static_cast<int64_t>(d));
      return "f" + text::float_repr(d);
    }
    case Kind::kNone:
      return "N";
    case Kind::kUndefined:
      return "U";
    case Kind::kTuple: {
      std::string k = "t";
      for (const auto& item : v.items()) {
        std::string sub = hash_key_at(item, depth + 1);
        k += std::to_string(sub.size()) + ":" + sub;
        if (k.size() > (1u << 20)) raise("dict key is too large");
      }
      return k;
    }
    case Kind::kNamespace:
    case Kind::kObject: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "o%p", v.identity());
      return buf;
    }
    default:
      raise("unhashable type: '" + type_name(v) + "'");
  }
}
}  // namespace

// ---- JSON ----

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict_data().set(Value::string(it.key()), from_json_at(it.value(), depth + 1));
      return d;
    }
    default:
      return Value::none();  // binary / discarded: not produced by JSON text
  }
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      append_json_escaped_ascii(out, c);
      continue;
    }
    size_t start = i;
    char32_t cp = text::decode(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(start, i - start));
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      out += buf;
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return text::float_repr(d);
}

struct JsonWriter {
  const JsonStyle& style;
  std::string out;
  size_t charged = 0;
  std::string indent_unit;
  bool indented;

  void newline(int level) {
    out += '\n';
    for (int k = 0; k < level; ++k) out += indent_unit;
  }

  std::string key_text(const Value& k) {
    switch (k.kind()) {
      case Kind::kString:
        return k.str();
      case Kind::kBool:
        return k.as_bool() ? "true" : "false";
      case Kind::kNone:
        return "null";
      case Kind::kInt:
        return std::to_string(k.as_int());
      case Kind::kFloat:
        return json_float(k.as_double());
      default:
        raise("keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void write(const Value& v, int level) {
    check_depth(level);
    if (out.size() - charged > (1u << 16)) {
      charge(out.size() - charged);
      charged = out.size();
    }
    switch (v.kind()) {
      case Kind::kNone:
        out += "null";
        return;
      case Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Kind::kFloat:
        out += json_float(v.as_double());
        return;
      case Kind::kString:
        json_string(out, v.str(), style.ensure_ascii);
        return;
      case Kind::kList:
      case Kind::kTuple: {
        if (v.flavor() != Flavor::kList)
          raise("Object of type " + type_name(v) + " is not JSON serializable");
        const auto& items = v.items();
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += style.item_sep;
          if (indented) newline(level + 1);
          write(items[k], level + 1);
        }
        if (indented) newline(level);
        out += ']';
        return;
      }
      case Kind::kDict: {
        const auto& d = v.dict_data();
        if (d.size() == 0) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> entries;
        entries.reserve(d.size());
        for (const auto& [k, val] : d.entries()) entries.emplace_back(key_text(k), &val);
        if (style.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        for (size_t k = 0; k < entries.size(); ++k) {
          if (k) out += style.item_sep;
          if (indented) newline(level + 1);
          json_string(out, entries[k].first, style.ensure_ascii);
          out += style.key_sep;
          write(*entries[k].second, level + 1);
        }
        if (indented) newline(level);
        out += '}';
        return;
      }
      default:
        raise("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }
};
}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

std::string to_json(const Value& v, const JsonStyle& style) {
  JsonWriter w{style, {}, 0, style.indent_unit, style.indented};
  w.write(v, 0);
  charge(w.out.size() - w.charged);
  return std::move(w.out);
}

}  // namespace m3::jinja
