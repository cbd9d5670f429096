// Syntax tree of a parsed Jinja template: plain structs owned by their parent through unique_ptr. A Template
// owns the root Body and outlives every render, so the evaluator and runtime macro objects may point into it.
// Expression and statement nodes share one struct each; `kind` says which fields are used.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/template/value.h"

namespace m3::jinja {

enum class ExprKind {
  kConst,    // value
  kName,     // name
  kGetattr,  // a.name
  kGetitem,  // a[b]
  kSlice,    // a:b:c inside a subscript; any of them may be null
  kList,     // items
  kTuple,    // items
  kDict,     // items (keys) / values
  kUnary,    // op a
  kBinary,   // a op b
  kAnd,      // a and b
  kOr,       // a or b
  kCompare,  // a then ops
  kCond,     // b if a else c (c may be null)
  kCall,     // a(items..., kwargs..., *dyn_args, **dyn_kwargs)
  kFilter,   // a | name(args); a is null inside {% filter %} / {% set x | f %}, meaning "the block's text"
  kTest,     // a is name(args)
};

enum class UnaryOp { kNeg, kPos, kNot };
enum class BinOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CmpOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;  // height of this subtree; the parser caps it so every recursive walk is bounded
  Value value;
  std::string name;
  int op = 0;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> values;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  std::vector<std::pair<CmpOp, ExprPtr>> ops;

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Left-hand side of set / for / with: a name, `ns.attr`, or a (nested) tuple of names.
struct Target {
  enum class Kind { kName, kNsAttr, kTuple } kind = Kind::kName;
  std::string name;
  std::string attr;
  std::vector<Target> items;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null where the parameter has no default
  Body body;
  // Jinja only accepts extra positional / keyword arguments (and a caller) when the body mentions these
  // names.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
  std::vector<std::string> frame_undefined;  // see scoping.h
};

enum class StmtKind {
  kText,         // text
  kPrint,        // {{ expr }}
  kIf,           // expr, body, else_body (an elif chain nests as a single kIf in else_body)
  kFor,          // target in expr [if cond] [recursive]: body, else_body
  kSet,          // target = expr
  kSetBlock,     // {% set target [| filter] %}body{% endset %}
  kMacro,        // macro
  kCallBlock,    // {% call(macro params) expr %}: macro is the caller
  kFilterBlock,  // {% filter expr %}body
  kWith,         // assigns, body
  kScope,        // block / generation / autoescape: body rendered in place in a child scope
  kBreak,
  kContinue,
  kDo,  // expr
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  Body body;
  Body else_body;
  bool recursive = false;
  std::unique_ptr<MacroDef> macro;
  std::vector<std::pair<Target, ExprPtr>> assigns;
  // Names bound to Undefined when the body (for: each iteration) / the for-else block starts; see scoping.h.
  std::vector<std::string> frame_undefined;
  std::vector<std::string> else_undefined;

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

}  // namespace m3::jinja
