// Mirrors jinja2/idtracking.py: each frame is scanned like FrameSymbolVisitor scans it (nested loop, macro
// and block bodies are other frames and are scanned afterwards, once the enclosing frame's names are all
// known); stores inside `if` branches are conditional and never make a name start undefined.
#include "chat/template/scoping.h"

#include <functional>
#include <set>

namespace m3::jinja {
namespace {

class Frame {
 public:
  explicit Frame(const Frame* parent) : parent_(parent) {}

  void param(const std::string& name) { refs_.insert(name); }

  void params(const Target& t) {
    if (t.kind == Target::Kind::kTuple) {
      for (const auto& item : t.items) params(item);
    } else {
      param(t.name);
    }
  }

  void statements(Body& body, bool conditional) {
    for (auto& st : body) stmt(*st, conditional);
  }

  void expr(const Expr* e) {
    if (!e) return;
    if (e->kind == ExprKind::kName) refs_.insert(e->name);
    expr(e->a.get());
    expr(e->b.get());
    expr(e->c.get());
    for (const auto& x : e->items) expr(x.get());
    for (const auto& x : e->values) expr(x.get());
    for (const auto& kv : e->kwargs) expr(kv.second.get());
    expr(e->dyn_args.get());
    expr(e->dyn_kwargs.get());
    for (const auto& op : e->ops) expr(op.second.get());
  }

  // Scans the frames nested in this one, now that this frame's references are complete.
  void finish() {
    for (auto& child : children_) child(*this);
  }

  std::vector<std::string> undefined;

 private:
  const Frame* parent_;
  std::set<std::string> refs_;
  std::vector<std::function<void(const Frame&)>> children_;

  bool known_outside(const std::string& name) const {
    for (const Frame* f = parent_; f; f = f->parent_)
      if (f->refs_.count(name)) return true;
    return false;
  }

  void store(const std::string& name, bool conditional) {
    if (refs_.insert(name).second && !conditional && !known_outside(name)) undefined.push_back(name);
  }

  void target(const Target& t, bool conditional) {
    switch (t.kind) {
      case Target::Kind::kName:
        store(t.name, conditional);
        break;
      case Target::Kind::kNsAttr:
        refs_.insert(t.name);
        break;
      case Target::Kind::kTuple:
        for (const auto& item : t.items) target(item, conditional);
        break;
    }
  }

  static void macro_frame(MacroDef& m, const Frame& parent) {
    Frame f(&parent);
    for (const auto& p : m.params) f.param(p);
    if (m.uses_caller) f.param("caller");
    if (m.uses_varargs) f.param("varargs");
    if (m.uses_kwargs) f.param("kwargs");
    for (const auto& d : m.defaults) f.expr(d.get());
    f.statements(m.body, false);
    m.frame_undefined = f.undefined;
    f.finish();
  }

  static void body_frame(Body& body, const Frame& parent, std::vector<std::string>& out,
                         const std::function<void(Frame&)>& prelude) {
    Frame f(&parent);
    if (prelude) prelude(f);
    f.statements(body, false);
    out = f.undefined;
    f.finish();
  }

  void stmt(Stmt& s, bool conditional) {
    switch (s.kind) {
      case StmtKind::kPrint:
      case StmtKind::kDo:
        expr(s.expr.get());
        break;
      case StmtKind::kIf:
        expr(s.expr.get());
        statements(s.body, true);
        statements(s.else_body, true);
        break;
      case StmtKind::kFor:
        expr(s.expr.get());
        children_.push_back([&s](const Frame& self) {
          body_frame(s.body, self, s.frame_undefined, [&s](Frame& f) {
            f.params(s.target);
            f.param("loop");
            f.expr(s.cond.get());
          });
          body_frame(s.else_body, self, s.else_undefined, nullptr);
        });
        break;
      case StmtKind::kSet:
        expr(s.expr.get());
        target(s.target, conditional);
        break;
      case StmtKind::kSetBlock:
        target(s.target, conditional);
        children_.push_back(
            [&s](const Frame& self) { body_frame(s.body, self, s.frame_undefined, nullptr); });
        break;
      case StmtKind::kMacro:
        store(s.macro->name, conditional);
        children_.push_back([&s](const Frame& self) { macro_frame(*s.macro, self); });
        break;
      case StmtKind::kCallBlock:
        expr(s.expr.get());
        children_.push_back([&s](const Frame& self) { macro_frame(*s.macro, self); });
        break;
      case StmtKind::kFilterBlock:
        expr(s.expr.get());
        children_.push_back(
            [&s](const Frame& self) { body_frame(s.body, self, s.frame_undefined, nullptr); });
        break;
      case StmtKind::kWith:
        for (const auto& a : s.assigns) expr(a.second.get());
        children_.push_back([&s](const Frame& self) {
          body_frame(s.body, self, s.frame_undefined, [&s](Frame& f) {
            for (const auto& a : s.assigns) f.params(a.first);
          });
        });
        break;
      case StmtKind::kScope:
        children_.push_back(
            [&s](const Frame& self) { body_frame(s.body, self, s.frame_undefined, nullptr); });
        break;
      default:
        break;
    }
  }
};

}  // namespace

std::vector<std::string> analyze_scoping(Body& root) {
  Frame top(nullptr);
  top.statements(root, false);
  std::vector<std::string> out = top.undefined;
  top.finish();
  return out;
}

}  // namespace m3::jinja
