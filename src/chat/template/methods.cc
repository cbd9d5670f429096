// Python str / list / dict methods that templates call (`content.split('x')`, `d.items()`) and the globals
// (range, dict, namespace, cycler, joiner, HF's raise_exception and strftime_now). Mutating list/dict methods
// exist although HF's ImmutableSandboxedEnvironment rejects them: llama.cpp-style templates use them, and
// accepting more than HF only matters for templates HF cannot render at all.
#include <algorithm>
#include <ctime>

#include "chat/template/builtins.h"
#include "chat/template/evaluator.h"
#include "chat/template/operators.h"
#include "chat/template/text_util.h"

namespace m3::jinja {

// ---- argument binding ----

ArgBinder::ArgBinder(std::string_view func, CallArgs& args, std::initializer_list<const char*> params)
    : func_(func), slots_(params.size()) {
  if (args.pos.size() > params.size())
    raise(func_ + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
          std::to_string(args.pos.size()) + " given)");
  for (size_t k = 0; k < args.pos.size(); ++k) slots_[k] = args.pos[k];
  for (auto& [key, value] : args.kw) {
    size_t idx = 0;
    for (const char* p : params) {
      if (key == p) break;
      ++idx;
    }
    if (idx == params.size()) raise(func_ + "() got an unexpected keyword argument " + text::repr(key));
    if (slots_[idx]) raise(func_ + "() got multiple values for argument " + text::repr(key));
    slots_[idx] = value;
  }
}

int64_t require_int(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  raise(std::string(what) + ": an integer is required, not '" + type_name(v) + "'");
}

int64_t ArgBinder::get_int(size_t i, int64_t fallback) const {
  if (!slots_[i] || slots_[i]->is_none()) return fallback;
  return require_int(*slots_[i], func_);
}

std::string ArgBinder::get_str(size_t i, std::string fallback) const {
  if (!slots_[i]) return fallback;
  if (!slots_[i]->is_string()) raise(func_ + "() argument must be str, not " + type_name(*slots_[i]));
  return slots_[i]->str();
}

namespace {

const char* const kStrMethods[] = {
    "strip",      "lstrip",   "rstrip",       "split",        "rsplit",    "splitlines",
    "startswith", "endswith", "replace",      "upper",        "lower",     "title",
    "capitalize", "find",     "rfind",        "index",        "rindex",    "count",
    "join",       "format",   "isdigit",      "isalpha",      "isalnum",   "isspace",
    "isupper",    "islower",  "removeprefix", "removesuffix", "partition", "rpartition",
    "ljust",      "rjust",    "center",       "zfill",        "isnumeric", "isdecimal"};
const char* const kListMethods[] = {"append", "extend", "insert",  "pop",   "remove", "index",
                                    "count",  "copy",   "reverse", "clear", "sort"};
const char* const kTupleMethods[] = {"index", "count"};
const char* const kDictMethods[] = {"items", "keys",   "values",     "get",  "copy",
                                    "pop",   "update", "setdefault", "clear"};

template <size_t N>
bool in_list(const char* const (&names)[N], std::string_view name) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

class BoundMethod : public Object {
 public:
  BoundMethod(Value receiver, std::string name) : receiver_(std::move(receiver)), name_(std::move(name)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override {
    return "<built-in method " + name_ + " of " + jinja::type_name(receiver_) + " object>";
  }
  Value call(Evaluator& ev, CallArgs& args) override {
    return jinja::call_method(ev, receiver_, name_, args);
  }
  void clear_refs() override { receiver_ = Value(); }

 private:
  Value receiver_;
  std::string name_;
};

const std::string* opt_str(const ArgBinder& a, size_t i, const char* func) {
  const Value* v = a.get(i);
  if (!v || v->is_none()) return nullptr;
  if (!v->is_string()) raise(std::string(func) + " arg must be None or str");
  return &v->str();
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  size_t bytes = 0;
  for (auto& p : parts) {
    bytes += p.size() + sizeof(Value);
    out.push_back(Value::string(std::move(p)));
  }
  charge(bytes);
  return Value::list(std::move(out));
}

// Code-point index of byte offset `pos` in s.
int64_t cp_index(const std::string& s, size_t pos) {
  return static_cast<int64_t>(text::length(std::string_view(s).substr(0, pos)));
}

bool prefix_match(const std::string& s, const Value& prefix, bool at_end) {
  auto one = [&](const Value& p) {
    if (!p.is_string())
      raise("startswith/endswith first arg must be str or a tuple of str, not " + type_name(p));
    const std::string& q = p.str();
    if (q.size() > s.size()) return false;
    return at_end ? s.compare(s.size() - q.size(), q.size(), q) == 0 : s.compare(0, q.size(), q) == 0;
  };
  if (prefix.is_tuple()) {
    for (const auto& p : prefix.items())
      if (one(p)) return true;
    return false;
  }
  return one(prefix);
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, int where) {
  int64_t n = static_cast<int64_t>(text::length(s));
  if (width > (int64_t{1} << 24)) raise("width is too large");
  if (width <= n) return s;
  int64_t total = width - n;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  charge(s.size() + static_cast<size_t>(total) * fill.size());
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < total - left; ++k) out += fill;
  return out;
}

std::string str_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) raise("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos)
      raise("format specifications and conversions in str.format are not supported");
    Value v;
    if (field.empty()) {
      if (auto_index >= args.pos.size())
        raise("Replacement index " + std::to_string(auto_index) + " out of range");
      v = args.pos[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t idx = std::stoul(field.substr(0, 9));
      if (idx >= args.pos.size()) raise("Replacement index " + field + " out of range");
      v = args.pos[idx];
    } else {
      auto it =
          std::find_if(args.kw.begin(), args.kw.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == args.kw.end()) raise("KeyError: " + text::repr(field));
      v = it->second;
    }
    out += to_str(v);
    i = close;
  }
  charge(out.size());
  return out;
}

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = text::decode(s, i);
    std::string ch = s.substr(start, i - start);
    if (text::is_alpha(c)) {
      out += prev_cased ? text::lower(ch) : text::upper(ch);
      prev_cased = true;
    } else {
      out += ch;
      prev_cased = false;
    }
  }
  return out;
}

template <typename Pred>
bool all_cps(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();)
    if (!pred(text::decode(s, i))) return false;
  return true;
}

Value str_method(const Value& recv, const std::string& name, CallArgs& args) {
  const std::string& s = recv.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder a(name, args, {"chars"});
    const std::string* chars = opt_str(a, 0, name.c_str());
    return Value::string(text::strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder a(name, args, {"sep", "maxsplit"});
    const std::string* sep = opt_str(a, 0, name.c_str());
    if (sep && sep->empty()) raise("empty separator");
    int64_t maxsplit = a.get_int(1, -1);
    return str_list(name == "split" ? text::split(s, sep, maxsplit) : text::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    ArgBinder a(name, args, {"keepends"});
    return str_list(text::splitlines(s, a.get_bool(0, false)));
  }
  if (name == "startswith" || name == "endswith") {
    ArgBinder a(name, args, {"prefix", "start", "end"});
    if (!a.has(0)) raise(name + "() takes at least 1 argument (0 given)");
    std::string target = s;
    if (a.has(1) || a.has(2)) {
      Value st = a.get_or(1, Value::none()), en = a.get_or(2, Value::none());
      target = slice_value(recv, &st, &en, nullptr).str();
    }
    return Value::boolean(prefix_match(target, *a.get(0), name == "endswith"));
  }
  if (name == "replace") {
    ArgBinder a(name, args, {"old", "new", "count"});
    if (!a.has(0) || !a.has(1)) raise("replace() takes at least 2 arguments");
    return replace_charged(s, a.get_str(0, ""), a.get_str(1, ""), a.get_int(2, -1));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    ArgBinder a(name, args, {});
    if (name == "upper") return Value::string(text::upper(s));
    if (name == "lower") return Value::string(text::lower(s));
    if (name == "title") return Value::string(py_title(s));
    return Value::string(text::capitalize(s));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgBinder a(name, args, {"sub", "start", "end"});
    if (!a.has(0)) raise(name + "() takes at least 1 argument (0 given)");
    std::string sub = a.get_str(0, "");
    std::string hay = s;
    int64_t offset = 0;
    if (a.has(1) || a.has(2)) {
      Value st = a.get_or(1, Value::none()), en = a.get_or(2, Value::none());
      hay = slice_value(recv, &st, &en, nullptr).str();
      int64_t len = static_cast<int64_t>(text::length(s));
      if (a.get(1) && !a.get(1)->is_none()) {
        offset = require_int(*a.get(1), name);
        if (offset < 0) offset = std::max<int64_t>(0, offset + len);
        offset = std::min(offset, len);
      }
    }
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::length(hay)) + 1);
      int64_t n = 0;
      for (size_t p = hay.find(sub); p != std::string::npos; p = hay.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t p = name[0] == 'r' ? hay.rfind(sub) : hay.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") raise("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(offset + cp_index(hay, p));
  }
  if (name == "join") {
    ArgBinder a(name, args, {"iterable"});
    if (!a.has(0)) raise("join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(*a.get(0))) {
      if (!item.is_string()) raise("sequence item: expected str instance, " + type_name(item) + " found");
      if (!first) out += s;
      first = false;
      out += item.str();
      charge(item.str().size() + s.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return Value::string(str_format(s, args));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    ArgBinder a(name, args, {});
    return Value::boolean(all_cps(s, text::is_digit));
  }
  if (name == "isalpha" || name == "isalnum" || name == "isspace") {
    ArgBinder a(name, args, {});
    if (name == "isalpha") return Value::boolean(all_cps(s, text::is_alpha));
    if (name == "isalnum") return Value::boolean(all_cps(s, text::is_alnum));
    return Value::boolean(all_cps(s, text::is_space));
  }
  if (name == "isupper" || name == "islower") {
    ArgBinder a(name, args, {});
    return Value::boolean(name == "isupper" ? text::is_upper_str(s) : text::is_lower_str(s));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgBinder a(name, args, {"affix"});
    std::string affix = a.get_str(0, "");
    bool front = name == "removeprefix";
    if (affix.size() <= s.size() && (front ? s.compare(0, affix.size(), affix) == 0
                                           : s.compare(s.size() - affix.size(), affix.size(), affix) == 0))
      return Value::string(front ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
    return recv;
  }
  if (name == "partition" || name == "rpartition") {
    ArgBinder a(name, args, {"sep"});
    std::string sep = a.get_str(0, "");
    if (sep.empty()) raise("empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition" ? Value::tuple({recv, Value::string(""), Value::string("")})
                                 : Value::tuple({Value::string(""), Value::string(""), recv});
    }
    return Value::tuple(
        {Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))});
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    ArgBinder a(name, args, {"width", "fillchar"});
    std::string fill = a.get_str(1, " ");
    if (text::length(fill) != 1) raise("The fill character must be exactly one character long");
    return Value::string(pad(s, a.get_int(0, 0), fill, name == "ljust" ? -1 : name == "rjust" ? 1 : 0));
  }
  if (name == "zfill") {
    ArgBinder a(name, args, {"width"});
    int64_t width = a.get_int(0, 0);
    bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    std::string body = pad(sign ? s.substr(1) : s, width - (sign ? 1 : 0), "0", 1);
    return Value::string(sign ? s.substr(0, 1) + body : body);
  }
  raise("'str' object has no attribute " + text::repr(name));
}

Value list_method(const Value& recv, const std::string& name, CallArgs& args) {
  auto& items = recv.items();
  if (name == "count") {
    ArgBinder a(name, args, {"value"});
    int64_t n = 0;
    for (const auto& v : items) n += equals(v, a.get_or(0, Value())) ? 1 : 0;
    return Value::integer(n);
  }
  if (name == "index") {
    ArgBinder a(name, args, {"value"});
    for (size_t k = 0; k < items.size(); ++k)
      if (equals(items[k], a.get_or(0, Value()))) return Value::integer(static_cast<int64_t>(k));
    raise(repr(a.get_or(0, Value())) + " is not in list");
  }
  if (name == "copy") return Value::list(items);
  if (name == "append") {
    ArgBinder a(name, args, {"object"});
    if (!a.has(0)) raise("append() takes exactly one argument (0 given)");
    charge(sizeof(Value));
    items.push_back(*a.get(0));
    return Value::none();
  }
  if (name == "extend") {
    ArgBinder a(name, args, {"iterable"});
    std::vector<Value> more = iterate(a.get_or(0, Value::none()));
    charge(more.size() * sizeof(Value));
    items.insert(items.end(), more.begin(), more.end());
    return Value::none();
  }
  if (name == "insert") {
    ArgBinder a(name, args, {"index", "object"});
    auto n = static_cast<int64_t>(items.size());
    int64_t idx = a.get_int(0, 0);
    if (idx < 0) idx = std::max<int64_t>(0, idx + n);
    idx = std::min(idx, n);
    charge(sizeof(Value));
    items.insert(items.begin() + idx, a.get_or(1, Value::none()));
    return Value::none();
  }
  if (name == "pop") {
    ArgBinder a(name, args, {"index"});
    if (items.empty()) raise("pop from empty list");
    auto n = static_cast<int64_t>(items.size());
    int64_t idx = a.get_int(0, -1);
    if (idx < 0) idx += n;
    if (idx < 0 || idx >= n) raise("pop index out of range");
    Value v = items[static_cast<size_t>(idx)];
    items.erase(items.begin() + idx);
    return v;
  }
  if (name == "remove") {
    ArgBinder a(name, args, {"value"});
    for (size_t k = 0; k < items.size(); ++k)
      if (equals(items[k], a.get_or(0, Value()))) {
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(k));
        return Value::none();
      }
    raise("list.remove(x): x not in list");
  }
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    return Value::none();
  }
  if (name == "clear") {
    items.clear();
    return Value::none();
  }
  if (name == "sort") {
    ArgBinder a(name, args, {"reverse"});
    bool rev = a.get_bool(0, false);
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return rev ? compare(y, x, "<") < 0 : compare(x, y, "<") < 0;
    });
    return Value::none();
  }
  raise("'list' object has no attribute " + text::repr(name));
}

Value dict_items(const Value& recv) {
  std::vector<Value> out;
  const auto& d = recv.dict_data();
  out.reserve(d.size());
  for (const auto& [k, v] : d.entries()) out.push_back(Value::tuple({k, v}));
  charge(out.size() * 3 * sizeof(Value));
  return Value::list(std::move(out), Flavor::kDictItems);
}

// dict(...), namespace(...) and dict.update(...): a mapping or (key, value) pairs, then keyword arguments.
void fill_dict(DictData& d, CallArgs& args, const char* func) {
  if (args.pos.size() > 1) raise(std::string(func) + " expected at most 1 argument");
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict() || src.is_namespace()) {
      for (const auto& [k, v] : src.dict_data().entries()) d.set(k, v);
    } else {
      for (const auto& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) raise("dictionary update sequence element has wrong length");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kw) d.set(Value::string(k), v);
}

Value dict_method(const Value& recv, const std::string& name, CallArgs& args) {
  DictData& d = recv.dict_data();
  if (name == "items" || name == "keys" || name == "values") {
    ArgBinder a(name, args, {});
    if (name == "items") return dict_items(recv);
    std::vector<Value> out;
    for (const auto& [k, v] : d.entries()) out.push_back(name == "keys" ? k : v);
    charge(out.size() * sizeof(Value));
    return Value::list(std::move(out), name == "keys" ? Flavor::kDictKeys : Flavor::kDictValues);
  }
  if (name == "get") {
    ArgBinder a(name, args, {"key", "default"});
    if (!a.has(0)) raise("get expected at least 1 argument, got 0");
    hash_key(*a.get(0));
    const Value* v = d.find(*a.get(0));
    return v ? *v : a.get_or(1, Value::none());
  }
  if (name == "copy") {
    Value c = Value::dict();
    for (const auto& [k, v] : d.entries()) c.dict_data().set(k, v);
    return c;
  }
  if (name == "pop") {
    ArgBinder a(name, args, {"key", "default"});
    if (!a.has(0)) raise("pop expected at least 1 argument, got 0");
    const Value* v = d.find(*a.get(0));
    if (!v) {
      if (a.has(1)) return *a.get(1);
      raise("KeyError: " + repr(*a.get(0)));
    }
    Value out = *v;
    d.erase(*a.get(0));
    return out;
  }
  if (name == "setdefault") {
    ArgBinder a(name, args, {"key", "default"});
    if (!a.has(0)) raise("setdefault expected at least 1 argument, got 0");
    if (const Value* v = d.find(*a.get(0))) return *v;
    Value def = a.get_or(1, Value::none());
    d.set(*a.get(0), def);
    return def;
  }
  if (name == "update") {
    fill_dict(d, args, "update");
    return Value::none();
  }
  if (name == "clear") {
    d.clear_refs();
    return Value::none();
  }
  raise("'dict' object has no attribute " + text::repr(name));
}

}  // namespace

Value replace_charged(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  size_t hits = old.empty() ? text::length(s) + 1 : 0;
  if (!old.empty())
    for (size_t p = s.find(old); p != std::string::npos; p = s.find(old, p + old.size())) ++hits;
  charge(s.size() + hits * repl.size());
  return Value::string(text::replace(s, old, repl, count));
}

bool has_method(const Value& receiver, std::string_view name) {
  switch (receiver.kind()) {
    case Kind::kString:
      return in_list(kStrMethods, name);
    case Kind::kList:
      return in_list(kListMethods, name);
    case Kind::kTuple:
      return in_list(kTupleMethods, name);
    case Kind::kDict:
      return in_list(kDictMethods, name);
    default:
      return false;
  }
}

Value bound_method(const Value& receiver, const std::string& name) {
  return Value::object(std::make_shared<BoundMethod>(receiver, name));
}

Value call_method(Evaluator& ev, const Value& receiver, const std::string& name, CallArgs& args) {
  (void)ev;
  switch (receiver.kind()) {
    case Kind::kString:
      return str_method(receiver, name, args);
    case Kind::kList:
    case Kind::kTuple:
      return list_method(receiver, name, args);
    case Kind::kDict:
      return dict_method(receiver, name, args);
    default:
      raise("'" + type_name(receiver) + "' object has no attribute " + text::repr(name));
  }
}

// ---- globals ----

namespace {

using GlobalFn = Value (*)(Evaluator&, CallArgs&);

class BuiltinFunction : public Object {
 public:
  BuiltinFunction(std::string name, GlobalFn fn) : name_(std::move(name)), fn_(fn) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  Value call(Evaluator& ev, CallArgs& args) override { return fn_(ev, args); }

 private:
  std::string name_;
  GlobalFn fn_;
};

// Jinja's sandbox refuses ranges longer than this (jinja2.sandbox.MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value g_range(Evaluator&, CallArgs& args) {
  if (!args.kw.empty()) raise("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3)
    raise("range expected at most 3 arguments, got " + std::to_string(args.pos.size()));
  int64_t start = 0, stop, step = 1;
  if (args.pos.size() == 1) {
    stop = require_int(args.pos[0], "range");
  } else {
    start = require_int(args.pos[0], "range");
    stop = require_int(args.pos[1], "range");
    if (args.pos.size() == 3) step = require_int(args.pos[2], "range");
  }
  if (step == 0) raise("range() arg 3 must not be zero");
  long double span =
      step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  long double count = span <= 0 ? 0
                                : (span + (std::abs(static_cast<long double>(step)) - 1)) /
                                      std::abs(static_cast<long double>(step));
  if (count > kMaxRange)
    raise("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) +
          ").");
  std::vector<Value> out;
  charge(static_cast<size_t>(count) * sizeof(Value));
  for (int64_t v = start; step > 0 ? v < stop : v > stop; v += step) {
    out.push_back(Value::integer(v));
    if ((step > 0 && v > INT64_MAX - step) || (step < 0 && v < INT64_MIN - step)) break;
  }
  return Value::list(std::move(out));
}

Value g_dict(Evaluator&, CallArgs& args) {
  Value d = Value::dict();
  fill_dict(d.dict_data(), args, "dict");
  return d;
}

Value g_namespace(Evaluator&, CallArgs& args) {
  Value ns = Value::namespace_object();
  fill_dict(ns.dict_data(), args, "namespace");
  return ns;
}

Value g_raise_exception(Evaluator&, CallArgs& args) {
  std::string msg = args.pos.empty() ? std::string() : to_str(args.pos[0]);
  throw TemplateError(msg, 0, true);
}

Value g_strftime_now(Evaluator&, CallArgs& args) {
  ArgBinder a("strftime_now", args, {"format"});
  std::string fmt = a.get_str(0, "");
  if (fmt.size() > 256) raise("strftime_now format is too long");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[2048];
  size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  bool is_callable() const override { return false; }
  void clear_refs() override { items_.clear(); }
  bool get_attr(std::string_view name, Value& out) override {
    if (name != "current") return false;
    out = items_[pos_];
    return true;
  }
  bool call_method(Evaluator&, const std::string& name, CallArgs&, Value& out) override {
    if (name == "next") {
      out = items_[pos_];
      pos_ = (pos_ + 1) % items_.size();
      return true;
    }
    if (name == "reset") {
      pos_ = 0;
      out = Value::none();
      return true;
    }
    return false;
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

Value g_cycler(Evaluator&, CallArgs& args) {
  if (args.pos.empty()) raise("at least one item has to be provided");
  return Value::object(std::make_shared<Cycler>(args.pos));
}

class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  Value call(Evaluator&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

Value g_joiner(Evaluator&, CallArgs& args) {
  ArgBinder a("joiner", args, {"sep"});
  return Value::object(std::make_shared<Joiner>(a.has(0) ? to_str(*a.get(0)) : ", "));
}

}  // namespace

void install_globals(Scope& globals) {
  static const std::pair<const char*, GlobalFn> kGlobals[] = {
      {"range", g_range},
      {"dict", g_dict},
      {"namespace", g_namespace},
      {"raise_exception", g_raise_exception},
      {"strftime_now", g_strftime_now},
      {"cycler", g_cycler},
      {"joiner", g_joiner},
  };
  for (const auto& [name, fn] : kGlobals)
    globals.set(name, Value::object(std::make_shared<BuiltinFunction>(name, fn)));
}

}  // namespace m3::jinja
