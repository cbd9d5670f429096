// Statement productions of the Jinja grammar (jinja2/parser.py subparse .. parse_assign_target), one function
// per production so that Jinja's quirks carry over: `if` tests and `for` iterables are parsed without the
// inline if-expression, an elif chain nests as a single If in the else branch, break/continue only inside a
// loop body.
#include "chat/template/parser.h"

#include "chat/template/parser_internal.h"

namespace m3::jinja {
namespace detail {

std::string Parser::describe(const Token& t) {
  switch (t.type) {
    case TokType::kName:
    case TokType::kOp:
      return t.text;
    case TokType::kString:
      return "string";
    case TokType::kInt:
      return "integer";
    case TokType::kFloat:
      return "float";
    case TokType::kVarBegin:
      return "begin of print statement";
    case TokType::kVarEnd:
      return "end of print statement";
    case TokType::kBlockBegin:
      return "begin of statement block";
    case TokType::kBlockEnd:
      return "end of statement block";
    case TokType::kText:
      return "template data";
    case TokType::kEof:
      return "end of template";
  }
  return "token";
}

Body Parser::subparse(std::initializer_list<const char*> end_tags, std::string& found) {
  DepthGuard guard(*this);
  Body body;
  while (true) {
    const Token& t = cur();
    switch (t.type) {
      case TokType::kText: {
        auto s = std::make_unique<Stmt>(StmtKind::kText, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
        break;
      }
      case TokType::kVarBegin: {
        next();
        auto s = std::make_unique<Stmt>(StmtKind::kPrint, t.line);
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokType::kVarEnd)
          fail("expected token 'end of print statement', got '" + describe(cur()) + "'");
        next();
        body.push_back(std::move(s));
        break;
      }
      case TokType::kBlockBegin: {
        next();
        if (cur().type == TokType::kName)
          for (const char* tag : end_tags)
            if (cur().text == tag) {
              found = tag;
              return body;
            }
        body.push_back(parse_statement(end_tags));
        break;
      }
      case TokType::kEof: {
        if (end_tags.size() != 0) fail(unexpected_end_message(end_tags));
        return body;
      }
      default:
        fail("unexpected '" + describe(t) + "'");
    }
  }
}

std::string Parser::expected_tags(std::initializer_list<const char*> end_tags) const {
  std::string s;
  size_t k = 0;
  for (const char* tag : end_tags) {
    if (k) s += k + 1 == end_tags.size() ? " or " : ", ";
    s += "'" + std::string(tag) + "'";
    ++k;
  }
  return s;
}

std::string Parser::unexpected_end_message(std::initializer_list<const char*> end_tags) const {
  std::string msg =
      "Unexpected end of template. Jinja was looking for the following tags: " + expected_tags(end_tags) +
      ".";
  if (!open_blocks_.empty())
    msg += " The innermost block that needs to be closed is '" + open_blocks_.back() + "'.";
  return msg;
}

StmtPtr Parser::parse_statement(std::initializer_list<const char*> end_tags) {
  if (cur().type != TokType::kName) fail("tag name expected");
  const std::string tag = cur().text;
  open_blocks_.push_back(tag);
  StmtPtr s;
  if (tag == "for") {
    s = parse_for();
  } else if (tag == "if") {
    s = parse_if();
  } else if (tag == "set") {
    s = parse_set();
  } else if (tag == "macro") {
    s = parse_macro();
  } else if (tag == "call") {
    s = parse_call_block();
  } else if (tag == "filter") {
    s = parse_filter_block();
  } else if (tag == "with") {
    s = parse_with();
  } else if (tag == "block" || tag == "generation" || tag == "autoescape") {
    s = parse_scope(tag);
  } else if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) fail("Cannot use '" + tag + "' outside of a loop.");
    s = std::make_unique<Stmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line());
    next();
    expect_block_end();
  } else if (tag == "do") {
    s = std::make_unique<Stmt>(StmtKind::kDo, line());
    next();
    s->expr = parse_tuple(false, true, {}, false);
    expect_block_end();
  } else if (tag == "extends" || tag == "include" || tag == "import" || tag == "from") {
    fail("'" + tag + "' is not supported: a chat template cannot load other templates");
  } else {
    std::string msg = "Encountered unknown tag '" + tag + "'.";
    if (end_tags.size() != 0) {
      msg += " Jinja was looking for the following tags: " + expected_tags(end_tags) + ".";
      if (open_blocks_.size() > 1)
        msg += " The innermost block that needs to be closed is '" + open_blocks_[open_blocks_.size() - 2] +
               "'.";
    }
    fail(msg);
  }
  open_blocks_.pop_back();
  return s;
}

void Parser::end_tag(const std::string& found) {
  (void)found;
  next();  // the end tag name
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>(StmtKind::kFor, line());
  next();
  s->target = parse_assign_target(true, false, {"in"}, false);
  expect_name_kw("in");
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (skip_name("if")) s->cond = parse_expression(true);
  if (skip_name("recursive")) s->recursive = true;
  expect_block_end();
  std::string found;
  ++loop_depth_;
  s->body = subparse({"endfor", "else"}, found);
  --loop_depth_;
  end_tag(found);
  expect_block_end();
  if (found == "else") {
    // Jinja's loop `else` runs outside the loop: break/continue there refer to an enclosing loop.
    s->else_body = subparse({"endfor"}, found);
    end_tag(found);
    expect_block_end();
  }
  return s;
}

StmtPtr Parser::parse_if() {
  auto root = std::make_unique<Stmt>(StmtKind::kIf, line());
  next();
  Stmt* node = root.get();
  while (true) {
    node->expr = parse_tuple(false, false, {}, false);
    expect_block_end();
    std::string found;
    node->body = subparse({"elif", "else", "endif"}, found);
    end_tag(found);
    if (found == "elif") {
      auto child = std::make_unique<Stmt>(StmtKind::kIf, line());
      Stmt* raw = child.get();
      node->else_body.push_back(std::move(child));
      node = raw;
      continue;
    }
    expect_block_end();
    if (found == "else") {
      node->else_body = subparse({"endif"}, found);
      end_tag(found);
      expect_block_end();
    }
    return root;
  }
}

StmtPtr Parser::parse_set() {
  int l = line();
  next();
  Target target = parse_assign_target(true, false, {}, true);
  if (skip_op("=")) {
    auto s = std::make_unique<Stmt>(StmtKind::kSet, l);
    s->target = std::move(target);
    s->expr = parse_tuple(false, true, {}, false);
    expect_block_end();
    return s;
  }
  auto s = std::make_unique<Stmt>(StmtKind::kSetBlock, l);
  s->target = std::move(target);
  if (is_op("|")) s->expr = parse_filter(nullptr, false);
  expect_block_end();
  std::string found;
  s->body = subparse({"endset"}, found);
  end_tag(found);
  expect_block_end();
  return s;
}

void Parser::parse_signature(MacroDef& m) {
  expect_op("(");
  while (!is_op(")")) {
    if (!m.params.empty()) expect_op(",");
    std::string p = expect_name();
    if (p == "true" || p == "false" || p == "none" || p == "True" || p == "False" || p == "None")
      fail("cannot assign to '" + p + "'");
    m.params.push_back(p);
    if (skip_op("=")) {
      m.defaults.push_back(parse_expression(true));
    } else {
      if (std::any_of(m.defaults.begin(), m.defaults.end(), [](const ExprPtr& d) { return d != nullptr; }))
        fail("non-default argument follows default argument");
      m.defaults.push_back(nullptr);
    }
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>(StmtKind::kMacro, line());
  next();
  s->macro = std::make_unique<MacroDef>();
  s->macro->name = expect_name();
  parse_signature(*s->macro);
  expect_block_end();
  s->macro->body = parse_macro_body(*s->macro, false);
  return s;
}

Body Parser::parse_macro_body(MacroDef& m, bool call_block) {
  macros_.push_back(&m);
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  std::string found;
  Body body = call_block ? subparse({"endcall"}, found) : subparse({"endmacro"}, found);
  loop_depth_ = saved_loops;
  macros_.pop_back();
  end_tag(found);
  expect_block_end();
  return body;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>(StmtKind::kCallBlock, line());
  next();
  s->macro = std::make_unique<MacroDef>();
  s->macro->name = "caller";
  if (is_op("(")) parse_signature(*s->macro);
  s->expr = parse_expression(true);
  if (s->expr->kind != ExprKind::kCall) fail("expected call", s->line);
  expect_block_end();
  s->macro->body = parse_macro_body(*s->macro, true);
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>(StmtKind::kFilterBlock, line());
  next();
  s->expr = parse_filter(nullptr, true);
  expect_block_end();
  std::string found;
  s->body = subparse({"endfilter"}, found);
  end_tag(found);
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>(StmtKind::kWith, line());
  next();
  while (cur().type != TokType::kBlockEnd) {
    if (!s->assigns.empty()) expect_op(",");
    Target t = parse_assign_target(true, false, {}, false);
    expect_op("=");
    s->assigns.emplace_back(std::move(t), parse_expression(true));
  }
  next();
  std::string found;
  s->body = subparse({"endwith"}, found);
  end_tag(found);
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_scope(const std::string& tag) {
  auto s = std::make_unique<Stmt>(StmtKind::kScope, line());
  next();
  if (tag == "block") {
    s->text = expect_name();
    while (is_name("scoped") || is_name("required")) next();
  } else if (tag == "autoescape") {
    parse_expression(true);  // HF renders without autoescaping; the flag changes nothing here
  }
  expect_block_end();
  std::string found;
  if (tag == "block") {
    s->body = subparse({"endblock"}, found);
    end_tag(found);
    if (cur().type == TokType::kName) {
      if (cur().text != s->text) fail("mismatching name on endblock: '" + cur().text + "'");
      next();
    }
  } else if (tag == "generation") {
    s->body = subparse({"endgeneration"}, found);
    end_tag(found);
  } else {
    s->body = subparse({"endautoescape"}, found);
    end_tag(found);
  }
  expect_block_end();
  return s;
}

Target Parser::to_target(const Expr& e) {
  if (e.kind == ExprKind::kName) {
    const std::string& n = e.name;
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      fail("Can't assign to special constant '" + n + "'", e.line);
    Target t;
    t.name = n;
    return t;
  }
  if (e.kind == ExprKind::kTuple) {
    Target t;
    t.kind = Target::Kind::kTuple;
    for (const auto& item : e.items) t.items.push_back(to_target(*item));
    return t;
  }
  if (e.kind == ExprKind::kConst) fail("Can't assign to special constant", e.line);
  fail("can't assign to '" + std::string(e.kind == ExprKind::kGetattr ? "Getattr" : "expression") + "'",
       e.line);
}

Target Parser::parse_assign_target(bool with_tuple, bool name_only,
                                   std::initializer_list<const char*> extra_end, bool with_namespace) {
  if (with_namespace && cur().type == TokType::kName && look().type == TokType::kOp && look().text == ".") {
    Target t;
    t.kind = Target::Kind::kNsAttr;
    t.name = expect_name();
    next();  // '.'
    t.attr = expect_name();
    return t;
  }
  if (name_only) {
    Target t;
    t.name = expect_name();
    return t;
  }
  ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
  return to_target(*e);
}

}  // namespace detail

Body parse_template(std::string_view source) {
  return detail::Parser(tokenize(source)).parse();
}

}  // namespace m3::jinja
