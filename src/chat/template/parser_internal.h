// Parser state shared by parser.cc (statements) and parse_expr.cc (expressions): the token cursor and the
// nesting counters. Internal to the template module; include parser.h instead.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template/ast.h"
#include "chat/template/lexer.h"

namespace m3::jinja::detail {

constexpr int kMaxNesting = 100;
constexpr int kMaxExprDepth = 400;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Body parse() {
    std::string end;
    Body body = subparse({}, end);
    return body;
  }

 private:
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;
  std::vector<std::string> open_blocks_;

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail("template nesting is too deep (more than 100 levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  int line() const { return cur().line; }

  [[noreturn]] void fail(const std::string& msg, int at_line = 0) {
    throw TemplateError(msg, at_line ? at_line : line());
  }

  // Records the height of a freshly built node; long operator or filter chains build deep left-leaning trees,
  // so height (not just bracket nesting) is what must stay bounded.
  ExprPtr seal(ExprPtr e);
  static std::string describe(const Token& t);

  bool is_op(std::string_view op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == TokType::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected token '" + std::string(op) + "', got '" + describe(cur()) + "'");
  }
  void expect_name_kw(std::string_view n) {
    if (!skip_name(n)) fail("expected token '" + std::string(n) + "', got '" + describe(cur()) + "'");
  }
  std::string expect_name() {
    if (cur().type != TokType::kName) fail("expected token 'name', got '" + describe(cur()) + "'");
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokType::kBlockEnd)
      fail("expected token 'end of statement block', got '" + describe(cur()) + "'");
    next();
  }

  void note_name(const std::string& n) {
    for (MacroDef* m : macros_) {
      if (n == "varargs") m->uses_varargs = true;
      if (n == "kwargs") m->uses_kwargs = true;
      if (n == "caller") m->uses_caller = true;
    }
  }

  // ---- statements ----

  Body subparse(std::initializer_list<const char*> end_tags, std::string& found);
  std::string expected_tags(std::initializer_list<const char*> end_tags) const;
  std::string unexpected_end_message(std::initializer_list<const char*> end_tags) const;
  StmtPtr parse_statement(std::initializer_list<const char*> end_tags);

  // Consumes `{% name %}` closing a block; the block-begin token was consumed by subparse.
  void end_tag(const std::string& found);
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  void parse_signature(MacroDef& m);
  StmtPtr parse_macro();
  Body parse_macro_body(MacroDef& m, bool call_block);
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  StmtPtr parse_scope(const std::string& tag);
  Target to_target(const Expr& e);
  Target parse_assign_target(bool with_tuple, bool name_only, std::initializer_list<const char*> extra_end,
                             bool with_namespace);

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parens);

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr();
  ExprPtr binary(ExprKind k, int op, ExprPtr a, ExprPtr b, int l);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr operand, bool start_inline);
  ExprPtr parse_test(ExprPtr operand);
};

}  // namespace m3::jinja::detail
