// Jinja's built-in filters, tests and globals, the Python str/list/dict methods templates call, and HF's
// additions (tojson as json.dumps, raise_exception, strftime_now). Invariants: arguments are validated like
// the Python originals and misuse raises TemplateError; anything that builds a string or list charges the
// Heap.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template/value.h"

namespace m3::jinja {

class Scope;

// Binds CallArgs to a Python-style signature: positional then keyword, no duplicates, no unknown keywords.
class ArgBinder {
 public:
  ArgBinder(std::string_view func, CallArgs& args, std::initializer_list<const char*> params);
  const Value* get(size_t i) const { return slots_[i] ? &*slots_[i] : nullptr; }
  bool has(size_t i) const { return slots_[i].has_value(); }
  Value get_or(size_t i, Value fallback) const { return slots_[i] ? *slots_[i] : std::move(fallback); }
  int64_t get_int(size_t i, int64_t fallback) const;
  bool get_bool(size_t i, bool fallback) const { return slots_[i] ? truthy(*slots_[i]) : fallback; }
  std::string get_str(size_t i, std::string fallback) const;

 private:
  std::string func_;
  std::vector<std::optional<Value>> slots_;
};

bool has_method(const Value& receiver, std::string_view name);
Value call_method(Evaluator& ev, const Value& receiver, const std::string& name, CallArgs& args);
Value bound_method(const Value& receiver, const std::string& name);

bool has_filter(const std::string& name);
Value apply_filter(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args);
bool has_test(const std::string& name);
bool apply_test(Evaluator& ev, const std::string& name, const Value& v, CallArgs& args);

// range, dict, namespace, raise_exception, strftime_now, cycler, joiner.
void install_globals(Scope& globals);

// str.replace (the method and the filter): `count` < 0 replaces all; the result is charged to the heap.
Value replace_charged(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

// Python int(value) for filters and methods that require an integer argument.
int64_t require_int(const Value& v, std::string_view what);

}  // namespace m3::jinja
