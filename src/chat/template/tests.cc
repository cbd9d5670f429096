// Jinja 3.1's built-in tests (jinja2/tests.py): `x is defined`, `x is mapping`, `x is divisibleby 3`, ...
// with Python's type model (bool is a number, an Undefined is iterable, a generator is not a sequence).
#include <unordered_map>

#include "chat/template/builtins.h"
#include "chat/template/evaluator.h"
#include "chat/template/operators.h"
#include "chat/template/text_util.h"

namespace m3::jinja {
namespace {

using TestFn = bool (*)(Evaluator&, const Value&, CallArgs&);

const Value& arg0(CallArgs& args, const char* name) {
  if (args.pos.size() != 1 || !args.kw.empty())
    raise(std::string("test '") + name + "' takes exactly one argument");
  return args.pos[0];
}

void no_args(CallArgs& args, const char* name) {
  if (!args.pos.empty() || !args.kw.empty()) raise(std::string("test '") + name + "' takes no arguments");
}

bool t_defined(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "defined"), !v.is_undefined();
}
bool t_undefined(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "undefined"), v.is_undefined();
}
bool t_none(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "none"), v.is_none();
}
bool t_boolean(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "boolean"), v.is_bool();
}
bool t_true(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "true"), v.is_bool() && v.as_bool();
}
bool t_false(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "false"), v.is_bool() && !v.as_bool();
}
bool t_integer(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "integer"), v.is_int();
}
bool t_float(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "float"), v.is_float();
}
bool t_number(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "number"), v.is_number();
}
bool t_string(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "string"), v.is_string();
}
bool t_mapping(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "mapping"), v.is_dict();
}
bool t_iterable(Evaluator&, const Value& v, CallArgs& a) {
  no_args(a, "iterable");
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
}
bool t_sequence(Evaluator&, const Value& v, CallArgs& a) {
  no_args(a, "sequence");
  return v.is_undefined() || v.is_string() || (v.is_sequence() && v.flavor() == Flavor::kList) || v.is_dict();
}
bool t_callable(Evaluator&, const Value& v, CallArgs& a) {
  no_args(a, "callable");
  return v.is_undefined() || (v.is_object() && v.obj().is_callable());
}
bool t_escaped(Evaluator&, const Value&, CallArgs& a) {
  return no_args(a, "escaped"), false;
}
bool t_lower(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "lower"), text::is_lower_str(to_str(v));
}
bool t_upper(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "upper"), text::is_upper_str(to_str(v));
}

bool mod2_is(const Value& v, int64_t want) {
  return equals(binary_op(BinOp::kMod, v, Value::integer(2)), Value::integer(want));
}
bool t_odd(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "odd"), mod2_is(v, 1);
}
bool t_even(Evaluator&, const Value& v, CallArgs& a) {
  return no_args(a, "even"), mod2_is(v, 0);
}
bool t_divisibleby(Evaluator&, const Value& v, CallArgs& a) {
  const Value& n = arg0(a, "divisibleby");
  Value r = binary_op(BinOp::kMod, v, n);
  return r.as_double() == 0;
}
bool t_eq(Evaluator&, const Value& v, CallArgs& a) {
  return equals(v, arg0(a, "eq"));
}
bool t_ne(Evaluator&, const Value& v, CallArgs& a) {
  return !equals(v, arg0(a, "ne"));
}
bool t_lt(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, arg0(a, "lt"), "<") < 0;
}
bool t_le(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, arg0(a, "le"), "<=") <= 0;
}
bool t_gt(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, arg0(a, "gt"), ">") > 0;
}
bool t_ge(Evaluator&, const Value& v, CallArgs& a) {
  return compare(v, arg0(a, "ge"), ">=") >= 0;
}
bool t_in(Evaluator&, const Value& v, CallArgs& a) {
  return contains(arg0(a, "in"), v);
}
bool t_sameas(Evaluator&, const Value& v, CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kNone:
    case Kind::kUndefined:
      return true;
    case Kind::kBool:
      return v.as_bool() == o.as_bool();
    case Kind::kInt:  // CPython caches small ints, so `1 is 1` holds
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Kind::kFloat:
    case Kind::kString:
      return false;
    default:
      return v.identity() == o.identity();
  }
}
bool t_filter(Evaluator&, const Value& v, CallArgs& a) {
  no_args(a, "filter");
  return v.is_string() && has_filter(v.str());
}
bool t_test(Evaluator&, const Value& v, CallArgs& a) {
  no_args(a, "test");
  return v.is_string() && has_test(v.str());
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
  };
  return table;
}

}  // namespace

bool has_test(const std::string& name) {
  return tests().count(name) != 0;
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) raise("No test named " + text::repr(name) + ".");
  return it->second(ev, v, args);
}

}  // namespace m3::jinja
