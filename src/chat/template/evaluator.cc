// Renders a template body (see evaluator.h). Scoping follows Jinja's compiled code: every loop iteration
// starts from the enclosing scope (a `set` in the body does not survive the iteration, hence namespace()), a
// macro call gets a fresh scope whose parent is the defining scope, and set/filter/with blocks nest a scope.
#include "chat/template/evaluator.h"

#include <algorithm>
#include <deque>

#include "chat/template/builtins.h"
#include "chat/template/operators.h"
#include "chat/template/text_util.h"

namespace m3::jinja {
namespace {

class MacroObject : public Object {
 public:
  MacroObject(const MacroDef* def, std::weak_ptr<Scope> closure) : def_(def), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro " + text::repr(def_->name) + ">"; }
  Value call(Evaluator& ev, CallArgs& args) override { return ev.invoke_macro(*def_, closure_, args); }
  bool get_attr(std::string_view name, Value& out) override {
    if (name == "name") {
      out = Value::string(def_->name);
    } else if (name == "arguments") {
      std::vector<Value> params;
      for (const auto& p : def_->params) params.push_back(Value::string(p));
      out = Value::tuple(std::move(params));
    } else if (name == "catch_kwargs") {
      out = Value::boolean(def_->uses_kwargs);
    } else if (name == "catch_varargs") {
      out = Value::boolean(def_->uses_varargs);
    } else if (name == "caller") {
      out = Value::boolean(def_->uses_caller);
    } else {
      return false;
    }
    return true;
  }

 private:
  const MacroDef* def_;
  std::weak_ptr<Scope> closure_;
};

// The items a `for` visits. With an inline `if`, items are filtered lazily as in Jinja: the condition of an
// item is evaluated only when the loop reaches it (or when loop.last / loop.length / loop.nextitem look
// ahead), so it sees state changed by earlier iterations and an error in a later item surfaces only if
// reached.
struct LoopSource {
  std::vector<Value> items;
  size_t pos = 0;
  std::deque<Value> ready;  // items that passed the filter but have not been visited yet
  const Stmt* stmt;
  Evaluator* ev;
  std::shared_ptr<Scope> outer;

  bool fill() {
    while (ready.empty() && pos < items.size()) {
      Value& item = items[pos++];
      if (!stmt->cond || ev->loop_filter_accepts(*stmt, outer, item)) ready.push_back(std::move(item));
    }
    return !ready.empty();
  }
  bool next(Value& out) {
    if (!fill()) return false;
    out = std::move(ready.front());
    ready.pop_front();
    return true;
  }
  const Value* peek() { return fill() ? &ready.front() : nullptr; }
  size_t remaining() {
    while (pos < items.size()) {
      Value& item = items[pos++];
      if (!stmt->cond || ev->loop_filter_accepts(*stmt, outer, item)) ready.push_back(std::move(item));
    }
    return ready.size();
  }
  void clear() {
    items.clear();
    ready.clear();
    outer.reset();  // a namespace in the outer scope may hold this loop: break that cycle too
  }
};

// Jinja's `loop` variable. Recursive loops call it: loop(children).
class LoopObject : public Object {
 public:
  LoopObject(std::shared_ptr<LoopSource> source, int depth) : source_(std::move(source)), depth_(depth) {}
  size_t index0 = 0;
  Value current;

  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(length()) + ">";
  }
  void clear_refs() override {
    source_->clear();
    previous_ = current = last_changed_ = Value();
  }

  void advance(Value item) {
    previous_ = std::move(current);
    current = std::move(item);
  }

  int64_t length() const { return static_cast<int64_t>(index0 + 1 + source_->remaining()); }

  bool get_attr(std::string_view name, Value& out) override {
    auto i = static_cast<int64_t>(index0);
    if (name == "index") {
      out = Value::integer(i + 1);
    } else if (name == "index0") {
      out = Value::integer(i);
    } else if (name == "revindex") {
      out = Value::integer(length() - i);
    } else if (name == "revindex0") {
      out = Value::integer(length() - i - 1);
    } else if (name == "first") {
      out = Value::boolean(i == 0);
    } else if (name == "last") {
      out = Value::boolean(source_->peek() == nullptr);
    } else if (name == "length") {
      out = Value::integer(length());
    } else if (name == "depth") {
      out = Value::integer(depth_);
    } else if (name == "depth0") {
      out = Value::integer(depth_ - 1);
    } else if (name == "previtem") {
      out = i > 0 ? previous_ : Value::undefined("there is no previous item");
    } else if (name == "nextitem") {
      const Value* next = source_->peek();
      out = next ? *next : Value::undefined("there is no next item");
    } else {
      return false;
    }
    return true;
  }

  bool call_method(Evaluator&, const std::string& name, CallArgs& args, Value& out) override {
    if (name == "cycle") {
      if (args.pos.empty()) raise("no items for cycling given");
      out = args.pos[index0 % args.pos.size()];
      return true;
    }
    if (name == "changed") {
      Value now = Value::tuple(args.pos);
      bool changed = !has_changed_ || !equals(now, last_changed_);
      has_changed_ = true;
      last_changed_ = now;
      out = Value::boolean(changed);
      return true;
    }
    return false;
  }

  Value call(Evaluator& ev, CallArgs& args) override {
    if (!source_->stmt->recursive)
      raise("Tried to call non recursive loop.  Maybe you forgot the 'recursive' modifier.");
    if (args.pos.size() != 1 || !args.kw.empty()) raise("loop() takes exactly one argument");
    return Value::string(ev.run_recursive_loop(*source_->stmt, args.pos[0], depth_ + 1));
  }

 private:
  std::shared_ptr<LoopSource> source_;
  int depth_;
  Value previous_;
  Value last_changed_;
  bool has_changed_ = false;
};

}  // namespace

// ---- Scope ----

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get())
    for (const auto& [k, v] : s->vars_)
      if (k == name) return &v;
  return nullptr;
}

void Scope::set(std::string_view name, Value value) {
  for (auto& [k, v] : vars_)
    if (k == name) {
      v = std::move(value);
      return;
    }
  vars_.emplace_back(std::string(name), std::move(value));
}

// ---- Evaluator ----

namespace {
std::shared_ptr<Scope> frame_scope(std::shared_ptr<Scope> parent, const std::vector<std::string>& undefined) {
  auto scope = std::make_shared<Scope>(std::move(parent));
  for (const auto& name : undefined) scope->set(name, Value::undefined(text::repr(name) + " is undefined"));
  return scope;
}
}  // namespace

namespace {
// Restores the evaluator's current scope / output buffer when a nested render ends.
template <typename T>
struct Restore {
  T& slot;
  T saved;
  Restore(T& s, T replacement) : slot(s), saved(std::move(s)) { slot = std::move(replacement); }
  ~Restore() { slot = std::move(saved); }
};
}  // namespace

Evaluator::Evaluator(const RenderLimits& limits, std::shared_ptr<Scope> globals)
    : limits_(limits), root_(std::make_shared<Scope>(std::move(globals))), scope_(root_) {}

std::string Evaluator::render(const Body& body, const std::vector<std::string>& undefined_at_start) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  std::string out;
  Restore<std::string*> out_guard(out_, &out);
  scope_ = root_;
  for (const auto& name : undefined_at_start)
    root_->set(name, Value::undefined(text::repr(name) + " is undefined"));
  exec_body(body);
  return out;
}

void Evaluator::tick() {
  if (++steps_ > limits_.max_steps)
    raise("template exceeded its evaluation budget of " + std::to_string(limits_.max_steps) + " steps");
  auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t used = stack_base_ > here ? stack_base_ - here : here - stack_base_;
  if (used > limits_.max_stack_bytes) raise("template nesting is too deep");
}

void Evaluator::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes)
    raise("rendered output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  out_->append(text);
}

Evaluator::Flow Evaluator::exec_body(const Body& body) {
  for (const auto& st : body) {
    Flow f = exec(*st);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s) {
  try {
    tick();
    return exec_inner(s);
  } catch (const TemplateError& e) {
    if (e.line() != 0) throw;
    throw TemplateError(e.bare_message(), s.line, e.user_raised());
  }
}

std::string Evaluator::render_to_string(const Body& body, std::shared_ptr<Scope> scope, Flow& flow) {
  std::string buf;
  Restore<std::string*> out_guard(out_, &buf);
  Restore<std::shared_ptr<Scope>> scope_guard(scope_, std::move(scope));
  flow = exec_body(body);
  charge(buf.size());
  return buf;
}

Value Evaluator::make_macro(const MacroDef& def) {
  return Value::object(std::make_shared<MacroObject>(&def, std::weak_ptr<Scope>(scope_)));
}

Evaluator::Flow Evaluator::exec_inner(const Stmt& s) {
  switch (s.kind) {
    case StmtKind::kText:
      emit(s.text);
      return Flow::kNormal;
    case StmtKind::kPrint: {
      Value v = eval(*s.expr);
      if (v.is_string()) {
        emit(v.str());
      } else {
        emit(to_str(v));
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      return exec_body(truthy(eval(*s.expr)) ? s.body : s.else_body);
    case StmtKind::kFor:
      return exec_for(s, eval(*s.expr), 1);
    case StmtKind::kSet:
      assign(s.target, eval(*s.expr));
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      // Jinja renders set and filter blocks inline, so a break/continue inside one leaves the enclosing loop
      // at once and the block's partial text is dropped.
      Flow flow;
      Value text = Value::string(render_to_string(s.body, frame_scope(scope_, s.frame_undefined), flow));
      if (flow != Flow::kNormal) return flow;
      assign(s.target, s.expr ? eval_filter(*s.expr, &text) : text);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope_->set(s.macro->name, make_macro(*s.macro));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call_expr = *s.expr;
      Value callee = eval(*call_expr.a);
      CallArgs args = eval_args(call_expr);
      args.kw.emplace_back("caller", make_macro(*s.macro));
      emit(to_str(call(callee, args)));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      Flow flow;
      Value text = Value::string(render_to_string(s.body, frame_scope(scope_, s.frame_undefined), flow));
      if (flow != Flow::kNormal) return flow;
      emit(to_str(eval_filter(*s.expr, &text)));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const auto& [target, expr] : s.assigns) values.push_back(eval(*expr));
      auto child = frame_scope(scope_, s.frame_undefined);
      for (size_t k = 0; k < values.size(); ++k) bind(*child, s.assigns[k].first, values[k]);
      Restore<std::shared_ptr<Scope>> guard(scope_, std::move(child));
      return exec_body(s.body);
    }
    case StmtKind::kScope: {
      Restore<std::shared_ptr<Scope>> guard(scope_, frame_scope(scope_, s.frame_undefined));
      return exec_body(s.body);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kDo:
      eval(*s.expr);
      return Flow::kNormal;
  }
  return Flow::kNormal;
}

bool Evaluator::loop_filter_accepts(const Stmt& loop, const std::shared_ptr<Scope>& outer,
                                    const Value& item) {
  auto probe = std::make_shared<Scope>(outer);
  bind(*probe, loop.target, item);
  Restore<std::shared_ptr<Scope>> guard(scope_, std::move(probe));
  return truthy(eval(*loop.cond));
}

Evaluator::Flow Evaluator::exec_for(const Stmt& s, const Value& iterable, int depth) {
  auto source = std::make_shared<LoopSource>();
  source->items = iterate(iterable);
  source->stmt = &s;
  source->ev = this;
  source->outer = scope_;
  auto loop = std::make_shared<LoopObject>(source, depth);
  Value loop_value = Value::object(loop);
  // Jinja clears its "run the else block" flag at the end of the loop body, so the else block also runs when
  // every iteration left through break/continue. Reproduced as is.
  bool body_completed = false;
  Value item;
  for (size_t k = 0; source->next(item); ++k) {
    tick();
    loop->index0 = k;
    loop->advance(item);
    auto iteration = frame_scope(source->outer, s.frame_undefined);
    bind(*iteration, s.target, item);
    iteration->set("loop", loop_value);
    Restore<std::shared_ptr<Scope>> guard(scope_, std::move(iteration));
    Flow f = exec_body(s.body);
    if (f == Flow::kNormal) body_completed = true;
    if (f == Flow::kBreak) break;
  }
  if (body_completed || s.else_body.empty()) return Flow::kNormal;
  Restore<std::shared_ptr<Scope>> guard(scope_, frame_scope(source->outer, s.else_undefined));
  return exec_body(s.else_body);
}

std::string Evaluator::run_recursive_loop(const Stmt& loop, const Value& iterable, int depth) {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    raise("maximum recursion depth exceeded");
  }
  std::string buf;
  {
    Restore<std::string*> out_guard(out_, &buf);
    // The nested loop sees the scope of the iteration that called loop(), which encloses the loop's own
    // scope.
    exec_for(loop, iterable, depth);
  }
  --call_depth_;
  charge(buf.size());
  return buf;
}

Value Evaluator::invoke_macro(const MacroDef& def, const std::weak_ptr<Scope>& closure, CallArgs& args) {
  if (call_depth_ + 1 > limits_.max_call_depth) raise("maximum recursion depth exceeded");
  std::shared_ptr<Scope> parent = closure.lock();
  if (!parent) parent = root_;
  auto scope = std::make_shared<Scope>(parent);
  const size_t n = def.params.size();
  const size_t npos = std::min(args.pos.size(), n);
  std::vector<bool> given(n, false);
  for (size_t k = 0; k < npos; ++k) {
    scope->set(def.params[k], args.pos[k]);
    given[k] = true;
  }
  std::vector<std::pair<std::string, Value>> extra_kw;
  Value caller = Value::undefined("No caller defined");
  bool has_caller_param = std::find(def.params.begin(), def.params.end(), "caller") != def.params.end();
  for (auto& [key, value] : args.kw) {
    auto it = std::find(def.params.begin(), def.params.end(), key);
    auto idx = static_cast<size_t>(it - def.params.begin());
    if (it != def.params.end() && idx >= npos && !given[idx]) {
      scope->set(key, value);
      given[idx] = true;
    } else if (key == "caller" && def.uses_caller && !has_caller_param) {
      caller = value;
    } else {
      extra_kw.emplace_back(key, value);
    }
  }
  const std::string& name = def.name;
  if (!def.uses_varargs && args.pos.size() > n)
    raise("macro " + text::repr(name) + " takes not more than " + std::to_string(n) + " argument(s)");
  if (!def.uses_kwargs && !extra_kw.empty())
    raise("macro " + text::repr(name) + " takes no keyword argument " + text::repr(extra_kw[0].first));

  ++call_depth_;
  struct DepthRelease {
    int& d;
    ~DepthRelease() { --d; }
  } release{call_depth_};
  Restore<std::shared_ptr<Scope>> scope_guard(scope_, scope);
  for (size_t k = 0; k < n; ++k) {
    if (given[k]) continue;
    // Defaults are evaluated in the macro's own scope, so they may refer to earlier parameters.
    scope->set(def.params[k], def.defaults[k] ? eval(*def.defaults[k])
                                              : Value::undefined("parameter " + text::repr(def.params[k]) +
                                                                 " was not provided"));
  }
  if (def.uses_caller && !has_caller_param) scope->set("caller", caller);
  for (const auto& local : def.frame_undefined)
    scope->set(local, Value::undefined(text::repr(local) + " is undefined"));
  if (def.uses_kwargs) {
    Value kw = Value::dict();
    for (auto& [key, value] : extra_kw) kw.dict_data().set(Value::string(key), value);
    scope->set("kwargs", kw);
  }
  if (def.uses_varargs) {
    std::vector<Value> rest;
    for (size_t k = n; k < args.pos.size(); ++k) rest.push_back(args.pos[k]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  }
  std::string buf;
  {
    Restore<std::string*> out_guard(out_, &buf);
    exec_body(def.body);
  }
  charge(buf.size());
  return Value::string(std::move(buf));
}

void Evaluator::assign(const Target& t, const Value& v) {
  if (t.kind == Target::Kind::kNsAttr) {
    const Value* ns = scope_->find(t.name);
    if (!ns || !ns->is_namespace()) raise("cannot assign attribute on non-namespace object");
    ns->dict_data().set(Value::string(t.attr), v);
    return;
  }
  bind(*scope_, t, v);
}

void Evaluator::bind(Scope& scope, const Target& t, const Value& v) {
  if (t.kind == Target::Kind::kName) {
    scope.set(t.name, v);
    return;
  }
  if (t.kind == Target::Kind::kNsAttr) raise("cannot assign to a namespace attribute here");
  if (!(v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined()))
    raise("cannot unpack non-iterable " + type_name(v) + " object");
  std::vector<Value> items = iterate(v);
  if (items.size() > t.items.size())
    raise("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
  if (items.size() < t.items.size())
    raise("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
          std::to_string(items.size()) + ")");
  for (size_t k = 0; k < items.size(); ++k) bind(scope, t.items[k], items[k]);
}

// ---- expressions ----

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.is_object()) return callee.obj().call(*this, args);
  if (callee.is_undefined()) raise(callee.undefined_message());
  raise("'" + type_name(callee) + "' object is not callable");
}

CallArgs Evaluator::eval_args(const Expr& e) {
  CallArgs args;
  args.pos.reserve(e.items.size());
  for (const auto& a : e.items) args.pos.push_back(eval(*a));
  if (e.dyn_args) {
    Value extra = eval(*e.dyn_args);
    for (auto& v : iterate(extra)) args.pos.push_back(std::move(v));
  }
  for (const auto& [k, a] : e.kwargs) args.kw.emplace_back(k, eval(*a));
  if (e.dyn_kwargs) {
    Value extra = eval(*e.dyn_kwargs);
    if (!extra.is_dict()) raise("argument after ** must be a mapping, not " + type_name(extra));
    for (const auto& [k, v] : extra.dict_data().entries()) {
      if (!k.is_string()) raise("keywords must be strings");
      args.kw.emplace_back(k.str(), v);
    }
  }
  for (size_t i = 0; i < args.kw.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (args.kw[i].first == args.kw[j].first)
        raise("got multiple values for keyword argument " + text::repr(args.kw[i].first));
  return args;
}

Value Evaluator::eval_call(const Expr& e) {
  const Expr& fn = *e.a;
  if (fn.kind == ExprKind::kGetattr) {
    // obj.method(...) calls the method directly instead of materialising a bound method first.
    Value recv = eval(*fn.a);
    if (recv.is_undefined()) raise(recv.undefined_message());
    if (has_method(recv, fn.name)) {
      CallArgs args = eval_args(e);
      return call_method(*this, recv, fn.name, args);
    }
    Value callee = get_attr(recv, fn.name);
    CallArgs args = eval_args(e);
    Value out;
    if (recv.is_object() && recv.obj().call_method(*this, fn.name, args, out)) return out;
    return call(callee, args);
  }
  Value callee = eval(fn);
  CallArgs args = eval_args(e);
  return call(callee, args);
}

Value Evaluator::eval_filter(const Expr& e, const Value* block_input) {
  Value v;
  if (!e.a) {
    v = block_input ? *block_input : Value();
  } else if (block_input && e.a->kind == ExprKind::kFilter) {
    v = eval_filter(*e.a, block_input);
  } else {
    v = eval(*e.a);
  }
  CallArgs args = eval_args(e);
  return apply_filter(*this, e.name, v, args);
}

Value Evaluator::eval_compare(const Expr& e) {
  Value left = eval(*e.a);
  for (const auto& [op, rexpr] : e.ops) {
    Value right = eval(*rexpr);
    bool ok = false;
    switch (op) {
      case CmpOp::kEq:
        ok = equals(left, right);
        break;
      case CmpOp::kNe:
        ok = !equals(left, right);
        break;
      case CmpOp::kLt:
        ok = compare(left, right, "<") < 0;
        break;
      case CmpOp::kLe:
        ok = compare(left, right, "<=") <= 0;
        break;
      case CmpOp::kGt:
        ok = compare(left, right, ">") > 0;
        break;
      case CmpOp::kGe:
        ok = compare(left, right, ">=") >= 0;
        break;
      case CmpOp::kIn:
        ok = contains(right, left);
        break;
      case CmpOp::kNotIn:
        ok = !contains(right, left);
        break;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Evaluator::eval(const Expr& e) {
  tick();
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      if (const Value* v = scope_->find(e.name)) return *v;
      return Value::undefined(text::repr(e.name) + " is undefined");
    case ExprKind::kGetattr:
      return get_attr(eval(*e.a), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.a);
      if (e.b->kind == ExprKind::kSlice) {
        const Expr& s = *e.b;
        Value lo, hi, st;
        if (s.a) lo = eval(*s.a);
        if (s.b) hi = eval(*s.b);
        if (s.c) st = eval(*s.c);
        return slice_value(obj, s.a ? &lo : nullptr, s.b ? &hi : nullptr, s.c ? &st : nullptr);
      }
      return get_item(obj, eval(*e.b));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item));
      charge(items.size() * sizeof(Value));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::dict();
      for (size_t k = 0; k < e.items.size(); ++k) {
        Value key = eval(*e.items[k]);
        d.dict_data().set(key, eval(*e.values[k]));
      }
      charge(e.items.size() * 2 * sizeof(Value));
      return d;
    }
    case ExprKind::kUnary:
      return unary_op(static_cast<UnaryOp>(e.op), eval(*e.a));
    case ExprKind::kBinary: {
      Value a = eval(*e.a);
      return binary_op(static_cast<BinOp>(e.op), a, eval(*e.b));
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.a);
      return truthy(a) ? eval(*e.b) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.a);
      return truthy(a) ? a : eval(*e.b);
    }
    case ExprKind::kCompare:
      return eval_compare(e);
    case ExprKind::kCond:
      if (truthy(eval(*e.a))) return eval(*e.b);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      Value v = eval(*e.a);
      CallArgs args = eval_args(e);
      return Value::boolean(apply_test(*this, e.name, v, args));
    }
    case ExprKind::kSlice:
      raise("a slice is only valid inside a subscript");
  }
  raise("unknown expression");
}

}  // namespace m3::jinja
