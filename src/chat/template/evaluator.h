// Tree-walking renderer: variable scopes (Jinja's rules: `for` bodies and macro calls get their own scope,
// `if` does not, macros see the scope they were defined in), loops, macro calls and resource limits.
// Invariants: failures are TemplateErrors carrying the statement's line; output size, steps, call depth and
// native stack use are bounded by RenderLimits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/template/ast.h"
#include "chat/template/value.h"

namespace m3::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;
  size_t max_alloc_bytes = size_t{1} << 30;  // monotonic: every string/list a template operation builds
  uint64_t max_steps = 100'000'000;          // expression + statement evaluations
  int max_call_depth = 200;  // nested macro calls and recursive loops (Python's limit is ~1000 frames)
  size_t max_stack_bytes = size_t{2} << 20;  // native stack the renderer may use below its entry point
};

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
  const std::shared_ptr<Scope>& parent() const { return parent_; }

 private:
  std::shared_ptr<Scope> parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

class Evaluator {
 public:
  Evaluator(const RenderLimits& limits, std::shared_ptr<Scope> globals);
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // `undefined_at_start`: top-level names bound to Undefined before rendering (see scoping.h).
  std::string render(const Body& body, const std::vector<std::string>& undefined_at_start = {});

  // Entry points for builtins and runtime objects (macros, caller, recursive loop()).
  Value call(const Value& callee, CallArgs& args);
  Value invoke_macro(const MacroDef& def, const std::weak_ptr<Scope>& closure, CallArgs& args);
  std::string run_recursive_loop(const Stmt& loop, const Value& iterable, int depth);
  bool loop_filter_accepts(const Stmt& loop, const std::shared_ptr<Scope>& outer, const Value& item);
  void tick();

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  const RenderLimits limits_;
  std::shared_ptr<Scope> root_;
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  uintptr_t stack_base_ = 0;

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_inner(const Stmt& s);
  Flow exec_for(const Stmt& s, const Value& iterable, int depth);
  void emit(std::string_view text);
  std::string render_to_string(const Body& body, std::shared_ptr<Scope> scope, Flow& flow);
  void assign(const Target& t, const Value& v);
  void bind(Scope& scope, const Target& t, const Value& v);
  Value make_macro(const MacroDef& def);

  Value eval(const Expr& e);
  Value eval_call(const Expr& e);
  CallArgs eval_args(const Expr& e);
  Value eval_filter(const Expr& e, const Value* block_input);
  Value eval_compare(const Expr& e);
};

}  // namespace m3::jinja
