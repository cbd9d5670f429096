// Parsing of request bodies before any field is read: size was bounded by the HTTP layer; here the nesting
// depth is bounded (nlohmann's parser recurses, so 100k levels would overflow the stack), the body must be a
// JSON object, and typed field accessors reject wrong types with a 400 naming the field (no silent coercion).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace m3 {

// Throws ApiException (400) for invalid JSON, excessive nesting or a non-object.
nlohmann::ordered_json parse_json_object(std::string_view body, int max_depth = 64);

// Field accessors: absent or null -> nullopt; wrong type -> ApiException naming `key`.
std::optional<std::string> opt_string(const nlohmann::ordered_json& j, const char* key);
std::optional<bool> opt_bool(const nlohmann::ordered_json& j, const char* key);
std::optional<int64_t> opt_int(const nlohmann::ordered_json& j, const char* key);
std::optional<double> opt_number(const nlohmann::ordered_json& j, const char* key);
// A string or a list of strings (OpenAI `stop`), at most `max_items`.
std::vector<std::string> string_or_list(const nlohmann::ordered_json& j, const char* key, size_t max_items);

}  // namespace m3
