// Jinja 3.1's built-in filters, following jinja2/filters.py argument by argument, with HF's tojson
// (json.dumps: key order kept, ensure_ascii off). Filters that are generators in Jinja (map, select, unique,
// batch, items) return generator-flavoured lists (value.h). Not provided: groupby, slice, pprint, random,
// striptags, urlencode, urlize, wordwrap, xmlattr, filesizeformat.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "chat/template/builtins.h"
#include "chat/template/evaluator.h"
#include "chat/template/operators.h"
#include "chat/template/text_util.h"

namespace m3::jinja {
namespace {

using FilterFn = Value (*)(Evaluator&, const Value&, CallArgs&);

// jinja2.filters.make_attrgetter: "a.b.0" walks items (digits become indexes); `fallback` replaces Undefined.
struct AttrGetter {
  std::vector<Value> parts;
  Value fallback;
  bool lower = false;  // ignore_case postprocessing

  AttrGetter(const Value* attribute, bool ignore_case, Value fb = Value())
      : fallback(std::move(fb)), lower(ignore_case) {
    if (!attribute || attribute->is_none()) return;
    if (!attribute->is_string()) {
      parts.push_back(*attribute);
      return;
    }
    for (auto& p : text::split(attribute->str(), &kDot, -1)) {
      bool digits =
          !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits && p.size() < 18 ? Value::integer(std::stoll(p)) : Value::string(p));
    }
  }

  Value operator()(Value item) const {
    for (const auto& part : parts) {
      item = get_item(item, part);
      if (!fallback.is_undefined() && item.is_undefined()) item = fallback;
    }
    if (lower && item.is_string()) return Value::string(text::lower(item.str()));
    return item;
  }

  static inline const std::string kDot = ".";
};

std::string soft_str(const Value& v) {
  return to_str(v);
}

Value f_abs(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("abs", args, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) raise("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_undefined()) raise(v.undefined_message());
  raise("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("attr", args, {"name"});
  std::string name = a.get_str(0, "");
  if (v.is_undefined()) raise(v.undefined_message());
  Value out;
  if (v.is_namespace()) {
    if (const Value* x = v.dict_data().find(name)) return *x;
  } else if (v.is_object()) {
    if (v.obj().get_attr(name, out)) return out;
  } else if (has_method(v, name)) {
    return bound_method(v, name);
  }
  return Value::undefined(text::repr(object_type_repr(v)) + " has no attribute " + text::repr(name));
}

Value f_batch(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"});
  int64_t n = a.get_int(0, 0);
  std::vector<Value> out, tmp;
  for (auto& item : iterate(v)) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    if (a.has(1) && !a.get(1)->is_none() && static_cast<int64_t>(tmp.size()) < n) {
      charge(static_cast<size_t>(n - static_cast<int64_t>(tmp.size())) * sizeof(Value));
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(*a.get(1));
    }
    out.push_back(Value::list(std::move(tmp)));
  }
  charge(out.size() * sizeof(Value));
  return Value::list(std::move(out), Flavor::kGenerator);
}

Value f_capitalize(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("capitalize", args, {});
  return Value::string(text::capitalize(soft_str(v)));
}

Value f_center(Evaluator& ev, const Value& v, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  CallArgs inner;
  inner.pos.push_back(Value::integer(a.get_int(0, 80)));
  return call_method(ev, Value::string(soft_str(v)), "center", inner);
}

Value f_default(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (a.get_bool(1, false) && !truthy(v))) return a.get_or(0, Value::string(""));
  return v;
}

int compare_keys(const Value& x, const Value& y) {
  return compare(x, y, "<");
}

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(text::lower(v.str())) : v;
}

Value f_dictsort(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) raise("dictsort requires a mapping");
  std::string by = a.get_str(1, "key");
  if (by != "key" && by != "value") raise("You can only sort by either \"key\" or \"value\"");
  size_t pos = by == "key" ? 0 : 1;
  bool cs = a.get_bool(0, false), rev = a.get_bool(2, false);
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.dict_data().entries()) pairs.push_back(Value::tuple({k, val}));
  auto key = [&](const Value& p) { return cs ? p.items()[pos] : ignore_case(p.items()[pos]); };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    return rev ? compare_keys(key(y), key(x)) < 0 : compare_keys(key(x), key(y)) < 0;
  });
  return Value::list(std::move(pairs));
}

Value f_escape(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("escape", args, {});
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  charge(out.size());
  return Value::string(std::move(out));
}

Value f_first(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("first", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("last", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan spellings.
bool parse_py_float(const std::string& raw, double& out) {
  std::string s = text::strip(raw, nullptr, true, true);
  std::string clean;
  for (size_t k = 0; k < s.size(); ++k) {
    char c = s[k];
    if (c == '_') {
      bool ok = k > 0 && k + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[k - 1])) &&
                std::isdigit(static_cast<unsigned char>(s[k + 1]));
      if (!ok) return false;
      continue;
    }
    if (c == 'x' || c == 'X' || c == 'p' || c == 'P' || c == '(') return false;
    clean += c;
  }
  if (clean.empty()) return false;
  char* end = nullptr;
  out = std::strtod(clean.c_str(), &end);
  return end == clean.c_str() + clean.size();
}

bool parse_py_int(const std::string& raw, int64_t base, int64_t& out) {
  std::string s = text::strip(raw, nullptr, true, true);
  size_t k = 0;
  bool neg = false;
  if (k < s.size() && (s[k] == '+' || s[k] == '-')) neg = s[k++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (k + 1 < s.size() && s[k] == '0') {
      char p = static_cast<char>(s[k + 1] | 0x20);
      int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (pb && (base == 0 || base == pb)) {
        base = pb;
        k += 2;
        if (k < s.size() && s[k] == '_') ++k;
      }
    }
    if (base == 0) base = 10;
  }
  if (base < 2 || base > 36 || k >= s.size()) return false;
  unsigned __int128 acc = 0;
  bool last_us = true;
  for (; k < s.size(); ++k) {
    char c = s[k];
    if (c == '_') {
      if (last_us) return false;
      last_us = true;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                          : 99;
    if (d >= base) return false;
    acc = acc * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (acc > static_cast<unsigned __int128>(INT64_MAX) + 1) raise("integer overflow");
    last_us = false;
  }
  if (last_us) return false;
  if (!neg && acc > INT64_MAX) raise("integer overflow");
  out = neg ? static_cast<int64_t>(-acc) : static_cast<int64_t>(acc);
  return true;
}

int64_t float_to_int(double d) {
  if (!std::isfinite(d))
    raise(std::isnan(d) ? "cannot convert float NaN to integer" : "cannot convert float infinity to integer");
  if (std::fabs(d) >= 9.2e18) raise("integer overflow");
  return static_cast<int64_t>(d);
}

Value f_float(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  Value fallback = a.get_or(0, Value::number(0.0));
  if (v.is_undefined()) raise(v.undefined_message());
  if (v.is_number()) return Value::number(v.as_double());
  double d;
  if (v.is_string() && parse_py_float(v.str(), d)) return Value::number(d);
  return fallback;
}

Value f_int(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  Value fallback = a.get_or(0, Value::integer(0));
  int64_t base = a.get_int(1, 10);
  if (v.is_undefined()) raise(v.undefined_message());
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) return Value::integer(float_to_int(v.as_double()));
  if (v.is_string()) {
    int64_t i;
    if (parse_py_int(v.str(), base, i)) return Value::integer(i);
    double d;
    if (parse_py_float(v.str(), d)) return Value::integer(float_to_int(d));
  }
  return fallback;
}

Value f_format(Evaluator&, const Value& v, CallArgs& args) {
  if (!args.pos.empty() && !args.kw.empty())
    raise("can't handle positional and keyword arguments at the same time");
  if (!args.kw.empty()) {
    Value d = Value::dict();
    for (auto& [k, val] : args.kw) d.dict_data().set(Value::string(k), val);
    return Value::string(percent_format(soft_str(v), d));
  }
  return Value::string(percent_format(soft_str(v), Value::tuple(args.pos)));
}

Value f_indent(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  std::string unit;
  if (a.has(0) && a.get(0)->is_string()) {
    unit = a.get(0)->str();
  } else {
    int64_t w = a.get_int(0, 4);
    if (w > 4096) raise("indent width is too large");
    unit = std::string(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
  }
  bool first = a.get_bool(1, false), blank = a.get_bool(2, false);
  if (v.is_undefined()) raise(v.undefined_message());
  if (!v.is_string()) raise("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  std::string s = v.str() + "\n";
  std::vector<std::string> lines = text::splitlines(s, false);
  std::string out;
  charge(s.size() + lines.size() * unit.size());
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) out += "\n" + unit;
      out += lines[k];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) out += "\n" + (lines[k].empty() ? "" : unit + lines[k]);
  }
  if (first) out = unit + out;
  return Value::string(std::move(out));
}

Value f_items(Evaluator& ev, const Value& v, CallArgs& args) {
  ArgBinder a("items", args, {});
  if (v.is_undefined()) return Value::list({}, Flavor::kGenerator);
  if (!v.is_dict()) raise("Can only get item pairs from a mapping.");
  CallArgs none;
  return Value::list(call_method(ev, v, "items", none).items(), Flavor::kGenerator);
}

Value f_join(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  std::string sep = a.has(0) ? soft_str(*a.get(0)) : "";
  AttrGetter getter(a.get(1), false);
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    std::string s = soft_str(getter.parts.empty() ? item : getter(item));
    charge(s.size() + sep.size());
    out += s;
  }
  return Value::string(std::move(out));
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(text::length(v.str()));
    case Kind::kList:
    case Kind::kTuple:
      if (v.is_lazy()) break;
      return static_cast<int64_t>(v.items().size());
    case Kind::kDict:
      return static_cast<int64_t>(v.dict_data().size());
    default:
      break;
  }
  raise("object of type '" + type_name(v) + "' has no len()");
}

Value f_length(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("length", args, {});
  return Value::integer(py_len(v));
}

Value f_list(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("list", args, {});
  return Value::list(iterate(v));
}

Value f_lower(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("lower", args, {});
  return Value::string(text::lower(soft_str(v)));
}

Value f_upper(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("upper", args, {});
  return Value::string(text::upper(soft_str(v)));
}

Value f_map(Evaluator& ev, const Value& v, CallArgs& args) {
  std::vector<Value> items = iterate(v);
  std::vector<Value> out;
  out.reserve(items.size());
  auto attr_it =
      std::find_if(args.kw.begin(), args.kw.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (args.pos.empty() && attr_it != args.kw.end()) {
    Value attribute = attr_it->second, fallback = Value::none();
    bool has_default = false;
    for (auto& [k, val] : args.kw) {
      if (k == "attribute") continue;
      if (k != "default") raise("Unexpected keyword argument " + text::repr(k));
      fallback = val;
      has_default = true;
    }
    AttrGetter getter(&attribute, false, has_default && !fallback.is_none() ? fallback : Value());
    for (auto& item : items) {
      ev.tick();
      out.push_back(getter(item));
    }
  } else {
    if (args.pos.empty()) raise("map requires a filter argument");
    if (!args.pos[0].is_string()) raise("map filter name must be a string");
    std::string name = args.pos[0].str();
    CallArgs rest;
    rest.pos.assign(args.pos.begin() + 1, args.pos.end());
    rest.kw = args.kw;
    for (auto& item : items) {
      ev.tick();
      CallArgs copy = rest;
      out.push_back(apply_filter(ev, name, item, copy));
    }
  }
  charge(out.size() * sizeof(Value));
  return Value::list(std::move(out), Flavor::kGenerator);
}

Value min_max(const Value& v, CallArgs& args, bool want_max, const char* name) {
  ArgBinder a(name, args, {"case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  AttrGetter key(a.get(1), !a.get_bool(0, false));
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t k = 1; k < items.size(); ++k) {
    Value kk = key(items[k]);
    int c = compare(kk, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = k;
      best_key = kk;
    }
  }
  return items[best];
}

Value f_max(Evaluator&, const Value& v, CallArgs& args) {
  return min_max(v, args, true, "max");
}
Value f_min(Evaluator&, const Value& v, CallArgs& args) {
  return min_max(v, args, false, "min");
}

Value select_impl(Evaluator& ev, const Value& v, CallArgs& args, bool keep_if, bool by_attr) {
  size_t off = 0;
  std::optional<AttrGetter> getter;
  if (by_attr) {
    if (args.pos.empty()) raise("Missing parameter for attribute name");
    getter.emplace(&args.pos[0], false);
    off = 1;
  }
  std::string test;
  bool has_test = args.pos.size() > off;
  if (has_test) {
    if (!args.pos[off].is_string()) raise("test name must be a string");
    test = args.pos[off].str();
  }
  CallArgs rest;
  if (has_test) rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), args.pos.end());
  rest.kw = args.kw;
  std::vector<Value> out;
  for (auto& item : iterate(v)) {
    ev.tick();
    Value probe = getter ? (*getter)(item) : item;
    bool ok;
    if (has_test) {
      CallArgs copy = rest;
      ok = apply_test(ev, test, probe, copy);
    } else {
      ok = truthy(probe);
    }
    if (ok == keep_if) out.push_back(std::move(item));
  }
  charge(out.size() * sizeof(Value));
  return Value::list(std::move(out), Flavor::kGenerator);
}

Value f_select(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_impl(ev, v, a, true, false);
}
Value f_reject(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_impl(ev, v, a, false, false);
}
Value f_selectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_impl(ev, v, a, true, true);
}
Value f_rejectattr(Evaluator& ev, const Value& v, CallArgs& a) {
  return select_impl(ev, v, a, false, true);
}

Value f_replace(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  if (!a.has(0) || !a.has(1)) raise("replace() missing required arguments 'old' and 'new'");
  return replace_charged(soft_str(v), soft_str(*a.get(0)), soft_str(*a.get(1)), a.get_int(2, -1));
}

Value f_reverse(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("reverse", args, {});
  if (v.is_string()) {
    Value step = Value::integer(-1);
    return slice_value(v, nullptr, nullptr, &step);
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items), Flavor::kIterator);
}

Value f_round(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  int64_t precision = a.get_int(0, 0);
  std::string method = a.get_str(1, "common");
  if (method != "common" && method != "ceil" && method != "floor")
    raise("method must be common, ceil or floor");
  if (v.is_undefined()) raise(v.undefined_message());
  if (!v.is_number()) raise("type " + type_name(v) + " doesn't define __round__ method");
  if (precision > 300 || precision < -300) raise("round precision is out of range");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays an int for n >= 0
    double d = v.as_double();
    if (!std::isfinite(d)) return Value::number(d);
    if (precision == 0) return Value::number(std::nearbyint(d));
    if (precision > 0) {
      // printf rounds the exact binary value half-to-even, as CPython's round() does.
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), d);
      return Value::number(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::number(std::nearbyint(d / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("safe", args, {});
  return Value::string(soft_str(v));
}

Value f_sort(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool rev = a.get_bool(0, false), cs = a.get_bool(1, false);
  std::vector<AttrGetter> keys;
  if (a.has(2) && a.get(2)->is_string()) {
    std::string comma = ",";
    for (auto& part : text::split(a.get(2)->str(), &comma, -1)) {
      Value p = Value::string(part);
      keys.emplace_back(&p, !cs);
    }
  } else {
    keys.emplace_back(a.get(2), !cs);
  }
  std::vector<Value> items = iterate(v);
  std::vector<Value> sort_keys;
  sort_keys.reserve(items.size());
  for (const auto& item : items) {
    std::vector<Value> k;
    for (const auto& g : keys) k.push_back(g(item));
    sort_keys.push_back(Value::list(std::move(k)));
  }
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return rev ? compare(sort_keys[y], sort_keys[x], "<") < 0 : compare(sort_keys[x], sort_keys[y], "<") < 0;
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t k : order) out.push_back(items[k]);
  return Value::list(std::move(out));
}

Value f_string(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("string", args, {});
  return v.is_string() ? v : Value::string(soft_str(v));
}

Value f_sum(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  AttrGetter getter(a.get(0), false);
  Value acc = a.get_or(1, Value::integer(0));
  for (const auto& item : iterate(v)) acc = binary_op(BinOp::kAdd, acc, getter(item));
  return acc;
}

Value f_title(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("title", args, {});
  return Value::string(text::title_filter(soft_str(v)));
}

Value f_tojson(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = a.get_bool(0, false);
  style.sort_keys = a.get_bool(3, false);
  if (a.has(1) && !a.get(1)->is_none()) {
    const Value& ind = *a.get(1);
    style.indented = true;
    if (ind.is_string()) {
      style.indent_unit = ind.str();
    } else {
      int64_t w = require_int(ind, "tojson indent");
      if (w > 4096) raise("tojson indent is too large");
      style.indent_unit = std::string(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
    }
    style.item_sep = ",";
  }
  if (a.has(2) && !a.get(2)->is_none()) {
    const Value& sep = *a.get(2);
    if (!sep.is_sequence() || sep.items().size() != 2 || !sep.items()[0].is_string() ||
        !sep.items()[1].is_string())
      raise("tojson separators must be a pair of strings");
    style.item_sep = sep.items()[0].str();
    style.key_sep = sep.items()[1].str();
  }
  return Value::string(to_json(v, style));
}

Value f_trim(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  const Value* chars = a.get(0);
  std::string set = chars && !chars->is_none() ? soft_str(*chars) : "";
  return Value::string(text::strip(soft_str(v), chars && !chars->is_none() ? &set : nullptr, true, true));
}

Value f_truncate(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  int64_t length = a.get_int(0, 255);
  bool killwords = a.get_bool(1, false);
  std::string end = a.has(2) ? soft_str(*a.get(2)) : "...";
  int64_t leeway = a.get_int(3, 5);
  auto end_len = static_cast<int64_t>(text::length(end));
  if (length < end_len)
    raise("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) raise("expected leeway >= 0, got " + std::to_string(leeway));
  // Jinja measures and slices the value itself: a short list or dict comes back unchanged.
  if (py_len(v) <= length + leeway) return v;
  if (!v.is_string()) raise("truncate needs a string, got '" + type_name(v) + "'");
  std::string s = v.str();
  Value stop = Value::integer(length - end_len);
  std::string head = slice_value(Value::string(s), nullptr, &stop, nullptr).str();
  if (killwords) return Value::string(head + end);
  std::string space = " ";
  return Value::string(text::rsplit(head, &space, 1)[0] + end);
}

Value f_unique(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  AttrGetter key(a.get(1), !a.get_bool(0, false));
  std::vector<Value> out;
  std::vector<std::string> seen;
  for (const auto& item : iterate(v)) {
    std::string h = hash_key(key(item));
    if (std::find(seen.begin(), seen.end(), h) != seen.end()) continue;
    seen.push_back(std::move(h));
    out.push_back(item);
  }
  return Value::list(std::move(out), Flavor::kGenerator);
}

Value f_wordcount(Evaluator&, const Value& v, CallArgs& args) {
  ArgBinder a("wordcount", args, {});
  std::string s = soft_str(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = text::decode(s, i);
    bool w = c == '_' || text::is_alnum(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = {
      {"abs", f_abs},           {"attr", f_attr},
      {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},     {"count", f_length},
      {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape},     {"first", f_first},
      {"float", f_float},       {"forceescape", f_escape},
      {"format", f_format},     {"indent", f_indent},
      {"int", f_int},           {"items", f_items},
      {"join", f_join},         {"last", f_last},
      {"length", f_length},     {"list", f_list},
      {"lower", f_lower},       {"map", f_map},
      {"max", f_max},           {"min", f_min},
      {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace},   {"reverse", f_reverse},
      {"round", f_round},       {"safe", f_safe},
      {"select", f_select},     {"selectattr", f_selectattr},
      {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},           {"title", f_title},
      {"tojson", f_tojson},     {"trim", f_trim},
      {"truncate", f_truncate}, {"unique", f_unique},
      {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool has_filter(const std::string& name) {
  return filters().count(name) != 0;
}

Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) raise("No filter named " + text::repr(name) + ".");
  return it->second(ev, v, args);
}

}  // namespace m3::jinja
