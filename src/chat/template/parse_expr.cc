// Expression productions of jinja2/parser.py (parse_tuple .. parse_test) with Jinja's precedence quirks: `~`
// binds tighter than `+`, tests and filters tighter than `not` and comparisons, `**` is left-associative.
// Every node with children goes through seal(), which rejects trees deeper than kMaxExprDepth so that
// evaluating or destroying any parsed expression stays within a bounded stack.
#include "chat/template/parser_internal.h"

namespace m3::jinja::detail {

ExprPtr Parser::seal(ExprPtr e) {
  int d = 0;
  auto see = [&](const ExprPtr& c) {
    if (c) d = std::max(d, c->depth);
  };
  see(e->a);
  see(e->b);
  see(e->c);
  for (const auto& x : e->items) see(x);
  for (const auto& x : e->values) see(x);
  for (const auto& kv : e->kwargs) see(kv.second);
  see(e->dyn_args);
  see(e->dyn_kwargs);
  for (const auto& op : e->ops) see(op.second);
  e->depth = d + 1;
  if (e->depth > kMaxExprDepth) fail("expression is too deep (more than 400 levels)", e->line);
  return e;
}

bool Parser::is_tuple_end(std::initializer_list<const char*> extra_end) const {
  if (cur().type == TokType::kVarEnd || cur().type == TokType::kBlockEnd || cur().type == TokType::kEof ||
      is_op(")"))
    return true;
  for (const char* n : extra_end)
    if (is_name(n)) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                            bool explicit_parens) {
  int l = line();
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    if (simplified) {
      args.push_back(parse_primary());
    } else {
      args.push_back(parse_expression(with_condexpr));
    }
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
    l = line();
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) fail("Expected an expression, got '" + describe(cur()) + "'");
  }
  auto t = std::make_unique<Expr>(ExprKind::kTuple, l);
  t->items = std::move(args);
  return seal(std::move(t));
}

ExprPtr Parser::parse_condexpr() {
  DepthGuard guard(*this);
  int l = line();
  ExprPtr e = parse_or();
  while (skip_name("if")) {
    auto c = std::make_unique<Expr>(ExprKind::kCond, l);
    c->a = parse_or();
    c->b = std::move(e);
    if (skip_name("else")) c->c = parse_condexpr();
    e = seal(std::move(c));
    l = line();
  }
  return e;
}

ExprPtr Parser::binary(ExprKind k, int op, ExprPtr a, ExprPtr b, int l) {
  auto e = std::make_unique<Expr>(k, l);
  e->op = op;
  e->a = std::move(a);
  e->b = std::move(b);
  return seal(std::move(e));
}

ExprPtr Parser::parse_or() {
  int l = line();
  ExprPtr e = parse_and();
  while (skip_name("or")) {
    e = binary(ExprKind::kOr, 0, std::move(e), parse_and(), l);
    l = line();
  }
  return e;
}

ExprPtr Parser::parse_and() {
  int l = line();
  ExprPtr e = parse_not();
  while (skip_name("and")) {
    e = binary(ExprKind::kAnd, 0, std::move(e), parse_not(), l);
    l = line();
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    int l = line();
    next();
    auto e = std::make_unique<Expr>(ExprKind::kUnary, l);
    e->op = static_cast<int>(UnaryOp::kNot);
    e->a = parse_not();
    return seal(std::move(e));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int l = line();
  ExprPtr e = parse_math1();
  std::vector<std::pair<CmpOp, ExprPtr>> ops;
  while (true) {
    CmpOp op;
    if (cur().type == TokType::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                       cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
      const std::string& t = cur().text;
      op = t == "=="   ? CmpOp::kEq
           : t == "!=" ? CmpOp::kNe
           : t == "<"  ? CmpOp::kLt
           : t == "<=" ? CmpOp::kLe
           : t == ">"  ? CmpOp::kGt
                       : CmpOp::kGe;
      next();
    } else if (is_name("in")) {
      op = CmpOp::kIn;
      next();
    } else if (is_name("not") && look().type == TokType::kName && look().text == "in") {
      op = CmpOp::kNotIn;
      next();
      next();
    } else {
      break;
    }
    ops.emplace_back(op, parse_math1());
  }
  if (ops.empty()) return e;
  auto c = std::make_unique<Expr>(ExprKind::kCompare, l);
  c->a = std::move(e);
  c->ops = std::move(ops);
  return seal(std::move(c));
}

ExprPtr Parser::parse_math1() {
  int l = line();
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    BinOp op = cur().text == "+" ? BinOp::kAdd : BinOp::kSub;
    next();
    e = binary(ExprKind::kBinary, static_cast<int>(op), std::move(e), parse_concat(), l);
    l = line();
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  int l = line();
  ExprPtr e = parse_math2();
  while (skip_op("~"))
    e = binary(ExprKind::kBinary, static_cast<int>(BinOp::kConcat), std::move(e), parse_math2(), l);
  return e;
}

ExprPtr Parser::parse_math2() {
  int l = line();
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string& t = cur().text;
    BinOp op = t == "*" ? BinOp::kMul : t == "/" ? BinOp::kDiv : t == "//" ? BinOp::kFloorDiv : BinOp::kMod;
    next();
    e = binary(ExprKind::kBinary, static_cast<int>(op), std::move(e), parse_pow(), l);
    l = line();
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  int l = line();
  ExprPtr e = parse_unary(true);
  while (skip_op("**")) {
    e = binary(ExprKind::kBinary, static_cast<int>(BinOp::kPow), std::move(e), parse_unary(true), l);
    l = line();
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  int l = line();
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    DepthGuard guard(*this);
    UnaryOp op = cur().text == "-" ? UnaryOp::kNeg : UnaryOp::kPos;
    next();
    e = std::make_unique<Expr>(ExprKind::kUnary, l);
    e->op = static_cast<int>(op);
    e->a = parse_unary(false);
    e = seal(std::move(e));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  int l = t.line;
  if (t.type == TokType::kName) {
    auto e = std::make_unique<Expr>(ExprKind::kConst, l);
    if (t.text == "true" || t.text == "True") {
      e->value = Value::boolean(true);
    } else if (t.text == "false" || t.text == "False") {
      e->value = Value::boolean(false);
    } else if (t.text == "none" || t.text == "None") {
      e->value = Value::none();
    } else {
      e->kind = ExprKind::kName;
      e->name = t.text;
      note_name(t.text);
    }
    next();
    return e;
  }
  if (t.type == TokType::kString) {
    std::string s;
    while (cur().type == TokType::kString) {
      s += cur().text;
      next();
    }
    auto e = std::make_unique<Expr>(ExprKind::kConst, l);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == TokType::kInt || t.type == TokType::kFloat) {
    auto e = std::make_unique<Expr>(ExprKind::kConst, l);
    e->value = t.type == TokType::kInt ? Value::integer(t.ival) : Value::number(t.fval);
    next();
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(false, true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) {
    next();
    auto e = std::make_unique<Expr>(ExprKind::kList, l);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return seal(std::move(e));
  }
  if (is_op("{")) {
    next();
    auto e = std::make_unique<Expr>(ExprKind::kDict, l);
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->items.push_back(parse_expression(true));
      expect_op(":");
      e->values.push_back(parse_expression(true));
    }
    expect_op("}");
    return seal(std::move(e));
  }
  fail("unexpected '" + describe(t) + "'");
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = parse_filter(std::move(e), false);
    } else if (is_name("is")) {
      e = parse_test(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  int l = line();
  if (skip_op(".")) {
    const Token& t = cur();
    if (t.type == TokType::kName) {
      auto e = std::make_unique<Expr>(ExprKind::kGetattr, l);
      e->a = std::move(obj);
      e->name = t.text;
      next();
      return seal(std::move(e));
    }
    if (t.type != TokType::kInt) fail("expected name or number");
    auto e = std::make_unique<Expr>(ExprKind::kGetitem, l);
    e->a = std::move(obj);
    e->b = std::make_unique<Expr>(ExprKind::kConst, t.line);
    e->b->value = Value::integer(t.ival);
    next();
    return seal(std::move(e));
  }
  expect_op("[");
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  auto e = std::make_unique<Expr>(ExprKind::kGetitem, l);
  e->a = std::move(obj);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = std::make_unique<Expr>(ExprKind::kTuple, l);
    e->b->items = std::move(args);
    e->b = seal(std::move(e->b));
  }
  return seal(std::move(e));
}

ExprPtr Parser::parse_subscribed() {
  int l = line();
  ExprPtr start;
  if (!skip_op(":")) {
    ExprPtr e = parse_expression(true);
    if (!is_op(":")) return e;
    next();
    start = std::move(e);
  }
  auto s = std::make_unique<Expr>(ExprKind::kSlice, l);
  s->a = std::move(start);
  if (!is_op(":") && !is_op("]") && !is_op(",")) s->b = parse_expression(true);
  if (skip_op(":")) {
    if (!is_op("]") && !is_op(",")) s->c = parse_expression(true);
  }
  return seal(std::move(s));
}

void Parser::parse_call_args(Expr& e) {
  int l = line();
  expect_op("(");
  bool require_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail("invalid syntax for function call expression", l);
  };
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*")) {
      ensure(!e.dyn_args && !e.dyn_kwargs);
      next();
      e.dyn_args = parse_expression(true);
    } else if (is_op("**")) {
      ensure(!e.dyn_kwargs);
      next();
      e.dyn_kwargs = parse_expression(true);
    } else if (cur().type == TokType::kName && look().type == TokType::kOp && look().text == "=") {
      ensure(!e.dyn_kwargs);
      std::string key = cur().text;
      next();
      next();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
      e.items.push_back(parse_expression(true));
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = std::make_unique<Expr>(ExprKind::kCall, line());
  e->a = std::move(callee);
  parse_call_args(*e);
  return seal(std::move(e));
}

ExprPtr Parser::parse_filter(ExprPtr operand, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    auto e = std::make_unique<Expr>(ExprKind::kFilter, line());
    e->name = expect_name();
    while (skip_op(".")) e->name += "." + expect_name();
    if (is_op("(")) parse_call_args(*e);
    e->a = std::move(operand);
    operand = seal(std::move(e));
  }
  return operand;
}

ExprPtr Parser::parse_test(ExprPtr operand) {
  int l = line();
  next();  // 'is'
  bool negated = skip_name("not");
  auto e = std::make_unique<Expr>(ExprKind::kTest, l);
  e->name = expect_name();
  while (skip_op(".")) e->name += "." + expect_name();
  e->a = std::move(operand);
  const Token& t = cur();
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((t.type == TokType::kName || t.type == TokType::kString || t.type == TokType::kInt ||
              t.type == TokType::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    e->items.push_back(parse_postfix(parse_primary()));
  }
  e = seal(std::move(e));
  if (!negated) return e;
  auto n = std::make_unique<Expr>(ExprKind::kUnary, l);
  n->op = static_cast<int>(UnaryOp::kNot);
  n->a = std::move(e);
  return seal(std::move(n));
}

}  // namespace m3::jinja::detail
