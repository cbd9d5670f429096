// Schema-typed conversion of MiniMax-M3 tool-call parameter text into JSON text (serving-api.md §4.2), plus
// the JSON writer the tool-call parser uses. Invariants: nothing here throws on any input (model text or a
// malformed tools schema), output is Python json.dumps style (", " / ": ", non-ASCII raw), and work is linear
// in the input.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace m3::tool_schema {

// A JSON-schema node plus the document it lives in (local "$ref"s resolve against `root`). `node == nullptr`
// means "no schema known": values are then kept as strings, as vLLM does (§4.2, §8.6).
struct Schema {
  const nlohmann::json* node = nullptr;
  const nlohmann::json* root = nullptr;
};

// One parsed parameter element: its tag name, its direct text and its child elements in order of appearance.
struct XmlNode {
  std::string name;
  std::string text;
  std::vector<XmlNode> children;
};

// Schema of a child element `name` under `parent`: the array's `items` when the parent is an array (child tag
// names are then irrelevant), else the property (or `additionalProperties`) schema.
Schema child_schema(Schema parent, std::string_view name);

// True when a value under `schema` is always the raw text (first alternative is "string" and null is not
// allowed), so it can be streamed as it arrives.
bool is_verbatim_string(Schema schema);

// False when the schema is known and allows only scalars: a tag inside such an element then means the model
// left the element without its close tag.
bool accepts_children(Schema schema);

// Appends the JSON text for `node` converted under `schema`.
void append_converted(std::string& out, const XmlNode& node, Schema schema);

// Appends `s` as a JSON string literal. Bytes >= 0x80 are copied as they are (ensure_ascii=False).
void append_json_string(std::string& out, std::string_view s);

// Appends `value` as JSON text in the same style.
void append_json_value(std::string& out, const nlohmann::json& value);

}  // namespace m3::tool_schema
