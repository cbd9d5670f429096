// Python semantics of Jinja's operators and of its sandboxed attribute / item lookup: int/float arithmetic,
// `in`, slicing, iteration, `%` formatting. Invariants: type mismatches raise TemplateError with Python's
// message, using an Undefined raises its message, and results are charged to the Heap.
#pragma once

#include <string>
#include <vector>

#include "chat/template/ast.h"
#include "chat/template/value.h"

namespace m3::jinja {

Value binary_op(BinOp op, const Value& a, const Value& b);
Value unary_op(UnaryOp op, const Value& a);
bool contains(const Value& container, const Value& item);  // Python `item in container`
std::vector<Value> iterate(const Value& v);                // Python iter(); Undefined yields nothing

// Jinja's environment.getattr: a Python attribute (bound method) first, then the item; missing -> Undefined.
Value get_attr(const Value& obj, const std::string& name);
// Jinja's environment.getitem: the item first, then (for a string key) the attribute; missing -> Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; null pointers are omitted bounds.
Value slice_value(const Value& obj, const Value* start, const Value* stop, const Value* step);

std::string percent_format(const std::string& fmt, const Value& args);  // Python `fmt % args`

}  // namespace m3::jinja
