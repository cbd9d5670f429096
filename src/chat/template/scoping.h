// Jinja resolves a name once per frame (top level, loop body, macro, block): when its first reference there
// is an unconditional `set` (or a macro / block-set definition) and no enclosing frame mentions it, it starts
// out undefined, hiding a context variable of that name from nested loops and macros run before the `set`. A
// dynamic scope chain does not do this by itself, so this pass records such names for the evaluator.
#pragma once

#include <string>
#include <vector>

#include "chat/template/ast.h"

namespace m3::jinja {

// Annotates every frame under `root` (Stmt::frame_undefined / else_undefined, MacroDef::frame_undefined) and
// returns the top level's list.
std::vector<std::string> analyze_scoping(Body& root);

}  // namespace m3::jinja
