// Operator semantics (see operators.h). Integer arithmetic is int64 with overflow detection: Python would
// switch to big integers, which no chat template needs, so overflow is an error rather than a silent wrap.
#include "chat/template/operators.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "chat/template/builtins.h"
#include "chat/template/text_util.h"

namespace m3::jinja {
namespace {

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  raise(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
        type_name(b) + "'");
}

void check_defined(const Value& v) {
  if (v.is_undefined()) raise(v.undefined_message());
}

bool is_intlike(const Value& v) {
  return v.is_int() || v.is_bool();
}

template <typename Op>
Value checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) raise("integer overflow");
  return Value::integer(r);
}
bool add_ovf(int64_t x, int64_t y, int64_t* r) {
  return __builtin_add_overflow(x, y, r);
}
bool sub_ovf(int64_t x, int64_t y, int64_t* r) {
  return __builtin_sub_overflow(x, y, r);
}
bool mul_ovf(int64_t x, int64_t y, int64_t* r) {
  return __builtin_mul_overflow(x, y, r);
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > (uint64_t{1} << 40) / s.size())
      raise("string repetition is too large");
    charge(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) > (uint64_t{1} << 32) / items.size())
    raise("list repetition is too large");
  charge(items.size() * static_cast<size_t>(n) * sizeof(Value));
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::kConcat) {
    std::string s = to_str(a);
    std::string t = to_str(b);
    charge(s.size() + t.size());
    return Value::string(s + t);
  }
  if (op == BinOp::kMod && a.is_string()) return Value::string(percent_format(a.str(), b));
  check_defined(a);
  check_defined(b);
  bool nums = a.is_number() && b.is_number();
  bool ints = is_intlike(a) && is_intlike(b);
  switch (op) {
    case BinOp::kAdd:
      if (ints) return checked(add_ovf, a.as_int(), b.as_int());
      if (nums) return Value::number(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        charge(a.str().size() + b.str().size());
        return Value::string(a.str() + b.str());
      }
      if (a.kind() == b.kind() && a.is_sequence()) {
        charge((a.items().size() + b.items().size()) * sizeof(Value));
        std::vector<Value> out(a.items());
        out.insert(out.end(), b.items().begin(), b.items().end());
        return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
      }
      if (a.is_string()) raise("can only concatenate str (not \"" + type_name(b) + "\") to str");
      if (a.is_list()) raise("can only concatenate list (not \"" + type_name(b) + "\") to list");
      unsupported("+", a, b);
    case BinOp::kSub:
      if (ints) return checked(sub_ovf, a.as_int(), b.as_int());
      if (nums) return Value::number(a.as_double() - b.as_double());
      unsupported("-", a, b);
    case BinOp::kMul:
      if (ints) return checked(mul_ovf, a.as_int(), b.as_int());
      if (nums) return Value::number(a.as_double() * b.as_double());
      if ((a.is_string() || a.is_sequence()) && is_intlike(b)) return repeat(a, b.as_int());
      if ((b.is_string() || b.is_sequence()) && is_intlike(a)) return repeat(b, a.as_int());
      unsupported("*", a, b);
    case BinOp::kDiv:
      if (!nums) unsupported("/", a, b);
      if (b.as_double() == 0) raise("division by zero");
      return Value::number(a.as_double() / b.as_double());
    case BinOp::kFloorDiv:
      if (!nums) unsupported("//", a, b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) raise("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) raise("integer overflow");
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
      if (b.as_double() == 0) raise("float floor division by zero");
      return Value::number(std::floor(a.as_double() / b.as_double()));
    case BinOp::kMod:
      if (a.is_string()) return Value::string(percent_format(a.str(), b));
      if (!nums) unsupported("%", a, b);
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) raise("integer division or modulo by zero");
        if (y == -1) return Value::integer(0);
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::integer(m);
      }
      if (b.as_double() == 0) raise("float modulo");
      return Value::number(py_fmod(a.as_double(), b.as_double()));
    case BinOp::kPow:
      if (!nums) unsupported("** or pow()", a, b);
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), e = b.as_int(), acc = 1;
        while (e > 0) {
          if (e & 1)
            if (__builtin_mul_overflow(acc, base, &acc)) raise("integer overflow");
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) raise("integer overflow");
        }
        return Value::integer(acc);
      }
      if (a.as_double() == 0 && b.as_double() < 0) raise("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(a.as_double(), b.as_double()));
    case BinOp::kConcat:
      break;
  }
  raise("unknown operator");
}

Value unary_op(UnaryOp op, const Value& a) {
  if (op == UnaryOp::kNot) return Value::boolean(!truthy(a));
  check_defined(a);
  if (!a.is_number())
    raise(std::string("bad operand type for unary ") + (op == UnaryOp::kNeg ? "-" : "+") + ": '" +
          type_name(a) + "'");
  if (op == UnaryOp::kPos) return a.is_bool() ? Value::integer(a.as_int()) : a;
  if (a.is_float()) return Value::number(-a.as_double());
  if (a.as_int() == INT64_MIN) raise("integer overflow");
  return Value::integer(-a.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!item.is_string()) raise("'in <string>' requires string as left operand, not " + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple: {
      if (container.flavor() == Flavor::kDictItems || container.flavor() == Flavor::kList ||
          container.flavor() == Flavor::kDictValues || !container.is_lazy()) {
        for (const auto& v : container.items())
          if (equals(v, item)) return true;
        return false;
      }
      // `x in generator` consumes the generator up to and including the match.
      auto& items = container.items();
      for (size_t k = 0; k < items.size(); ++k) {
        if (equals(items[k], item)) {
          items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(k) + 1);
          return true;
        }
      }
      items.clear();
      return false;
    }
    case Kind::kDict:
      return container.dict_data().find(item) != nullptr;
    default:
      raise("argument of type '" + type_name(container) + "' is not iterable");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
    case Kind::kTuple:
      if (v.is_lazy()) {
        // A generator yields its items once.
        std::vector<Value> items = std::move(v.items());
        v.items().clear();
        return items;
      }
      return v.items();
    case Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict_data().size());
      for (const auto& [k, val] : v.dict_data().entries()) keys.push_back(k);
      return keys;
    }
    case Kind::kString: {
      const std::string& s = v.str();
      std::vector<Value> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        text::decode(s, i);
        out.push_back(Value::string(s.substr(start, i - start)));
      }
      charge(out.size() * sizeof(Value));
      return out;
    }
    default:
      raise("'" + type_name(v) + "' object is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      raise(obj.undefined_message());
    case Kind::kDict:
      if (has_method(obj, name)) return bound_method(obj, name);
      if (const Value* v = obj.dict_data().find(name)) return *v;
      break;
    case Kind::kNamespace:
      if (const Value* v = obj.dict_data().find(name)) return *v;
      break;
    case Kind::kObject: {
      Value out;
      if (obj.obj().get_attr(name, out)) return out;
      break;
    }
    default:
      if (has_method(obj, name)) return bound_method(obj, name);
      break;
  }
  return Value::undefined(text::repr(object_type_repr(obj)) + " has no attribute " + text::repr(name));
}

namespace {
bool index_of(const Value& key, int64_t size, int64_t& idx) {
  if (!is_intlike(key)) return false;
  idx = key.as_int();
  if (idx < 0) idx += size;
  return idx >= 0 && idx < size;
}
}  // namespace

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      raise(obj.undefined_message());
    case Kind::kDict:
    case Kind::kNamespace:
      if (obj.is_dict() && (key.is_list() || key.is_dict())) break;  // unhashable: Python's TypeError
      if (const Value* v = obj.dict_data().find(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.str());
      break;
    case Kind::kList:
    case Kind::kTuple: {
      if (obj.flavor() != Flavor::kList) break;  // generators, iterators and views are not subscriptable
      int64_t idx;
      if (index_of(key, static_cast<int64_t>(obj.items().size()), idx))
        return obj.items()[static_cast<size_t>(idx)];
      if (key.is_string()) return get_attr(obj, key.str());
      break;
    }
    case Kind::kString: {
      if (is_intlike(key)) {
        const std::string& s = obj.str();
        if (text::is_ascii(s)) {
          int64_t idx;
          if (index_of(key, static_cast<int64_t>(s.size()), idx))
            return Value::string(s.substr(static_cast<size_t>(idx), 1));
        } else {
          std::vector<char32_t> cps = text::to_code_points(s);
          int64_t idx;
          if (index_of(key, static_cast<int64_t>(cps.size()), idx))
            return Value::string(
                text::from_code_points(cps, static_cast<size_t>(idx), static_cast<size_t>(idx) + 1));
        }
      } else if (key.is_string()) {
        return get_attr(obj, key.str());
      }
      break;
    }
    case Kind::kObject:
      if (key.is_string()) return get_attr(obj, key.str());
      break;
    default:
      if (key.is_string()) return get_attr(obj, key.str());
      break;
  }
  if (key.is_string())
    return Value::undefined(text::repr(object_type_repr(obj)) + " has no attribute " + text::repr(key.str()));
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

Value slice_value(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) raise(obj.undefined_message());
  // Jinja compiles slices to plain Python subscripts (no environment.getitem), so errors propagate.
  if (obj.is_dict()) raise("unhashable type: 'slice'");
  if (obj.flavor() != Flavor::kList) raise("'" + type_name(obj) + "' object is not subscriptable");
  if (!obj.is_string() && !obj.is_sequence()) raise("'" + type_name(obj) + "' object is not subscriptable");
  auto bound = [](const Value* v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    if (!is_intlike(*v)) raise("slice indices must be integers or None or have an __index__ method");
    return v->as_int();
  };
  auto b = bound(start), e = bound(stop), s = bound(step);
  int64_t st = s.value_or(1);
  if (st == 0) raise("slice step cannot be zero");
  std::vector<char32_t> cps;
  bool ascii = obj.is_string() && text::is_ascii(obj.str());
  if (obj.is_string() && !ascii) cps = text::to_code_points(obj.str());
  int64_t len = obj.is_string()
                    ? (ascii ? static_cast<int64_t>(obj.str().size()) : static_cast<int64_t>(cps.size()))
                    : static_cast<int64_t>(obj.items().size());
  auto adjust = [&](int64_t v) {
    if (v < 0) {
      v += len;
      if (v < 0) v = st < 0 ? -1 : 0;
    } else if (v >= len) {
      v = st < 0 ? len - 1 : len;
    }
    return v;
  };
  int64_t lo = b ? adjust(*b) : (st < 0 ? len - 1 : 0);
  int64_t hi = e ? adjust(*e) : (st < 0 ? -1 : len);
  std::vector<int64_t> idx;
  if (st > 0) {
    for (int64_t k = lo; k < hi; k += st) idx.push_back(k);
  } else {
    for (int64_t k = lo; k > hi; k += st) idx.push_back(k);
  }
  if (obj.is_string()) {
    std::string out;
    if (ascii) {
      if (st == 1) {
        out = obj.str().substr(static_cast<size_t>(lo), static_cast<size_t>(std::max<int64_t>(0, hi - lo)));
      } else {
        for (int64_t k : idx) out += obj.str()[static_cast<size_t>(k)];
      }
    } else {
      for (int64_t k : idx) text::append_utf8(out, cps[static_cast<size_t>(k)]);
    }
    charge(out.size());
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t k : idx) out.push_back(obj.items()[static_cast<size_t>(k)]);
  charge(out.size() * sizeof(Value));
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.dict_data();
  }
  size_t next_arg = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) raise("not enough arguments for format string");
    return positional[next_arg++];
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) raise("incomplete format");
    Value keyed;
    bool has_key = false;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) raise("incomplete format key");
      if (!mapping) raise("format requires a mapping");
      const Value* v = mapping->find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!v) raise("KeyError: " + text::repr(fmt.substr(i + 1, close - i - 1)));
      keyed = *v;
      has_key = used_mapping = true;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
      spec += fmt[i++];
    size_t digits_start = spec.size();
    while (i < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[i])) || fmt[i] == '.'))
      spec += fmt[i++];
    if (i >= fmt.size()) raise("incomplete format");
    char conv = fmt[i];
    int width = std::atoi(spec.c_str() + digits_start);
    if (spec.size() - digits_start > 7 || width > 4096) raise("format width or precision is too large");
    if (conv == '%') {
      out += '%';
      continue;
    }
    const Value& v = has_key ? keyed : take();
    char buf[512];
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        // Precision (truncation) is not supported; width pads by code points as Python does.
        std::string s = conv == 's' ? to_str(v) : repr(v);
        bool left = spec.find('-') != std::string::npos;
        size_t n = text::length(s);
        std::string pad(n < static_cast<size_t>(width) ? static_cast<size_t>(width) - n : 0, ' ');
        out += left ? s + pad : pad + s;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        if (!v.is_number())
          raise(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
        long long n =
            v.is_float() ? static_cast<long long>(v.as_double()) : static_cast<long long>(v.as_int());
        if (conv == 'c') {
          text::append_utf8(out, static_cast<char32_t>(n));
          break;
        }
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::snprintf(buf, sizeof buf, (spec + "ll" + c).c_str(), n);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number()) raise("must be real number, not " + type_name(v));
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
        out += buf;
        break;
      }
      default:
        raise(std::string("unsupported format character '") + conv + "'");
    }
  }
  // Python skips this check when the argument supports item access (dict, list, Undefined, ...).
  bool subscriptable = args.is_dict() || args.is_list() || args.is_undefined();
  if (!used_mapping && !subscriptable && next_arg < positional.size())
    raise("not all arguments converted during string formatting");
  charge(out.size());
  return out;
}

}  // namespace m3::jinja
