// Recursive-descent parser for Jinja 3.1 syntax (the grammar of jinja2/parser.py, with HF's loopcontrols
// extension and its {% generation %} block). Invariants: the result is a complete Body or a TemplateError
// naming the line; nesting depth is capped so that hostile input cannot overflow the stack.
#pragma once

#include <string_view>

#include "chat/template/ast.h"

namespace m3::jinja {

Body parse_template(std::string_view source);

}  // namespace m3::jinja
