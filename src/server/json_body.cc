// Depth pre-scan (outside string literals) and typed accessors.
#include "server/json_body.h"

#include <cmath>

#include "server/api_error.h"

namespace m3 {

nlohmann::ordered_json parse_json_object(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        reject("request body nests deeper than " + std::to_string(max_depth) + " levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) reject("request body is not valid JSON");
  if (!j.is_object()) reject("request body must be a JSON object");
  return j;
}

static bool present(const nlohmann::ordered_json& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

std::optional<std::string> opt_string(const nlohmann::ordered_json& j, const char* key) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_string()) reject(std::string("'") + key + "' must be a string", key);
  return j[key].get<std::string>();
}

std::optional<bool> opt_bool(const nlohmann::ordered_json& j, const char* key) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_boolean()) reject(std::string("'") + key + "' must be a boolean", key);
  return j[key].get<bool>();
}

std::optional<int64_t> opt_int(const nlohmann::ordered_json& j, const char* key) {
  if (!present(j, key)) return std::nullopt;
  const auto& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e18) return static_cast<int64_t>(d);
  }
  reject(std::string("'") + key + "' must be an integer", key);
}

std::optional<double> opt_number(const nlohmann::ordered_json& j, const char* key) {
  if (!present(j, key)) return std::nullopt;
  if (!j[key].is_number()) reject(std::string("'") + key + "' must be a number", key);
  double d = j[key].get<double>();
  if (!std::isfinite(d)) reject(std::string("'") + key + "' must be finite", key);
  return d;
}

std::vector<std::string> string_or_list(const nlohmann::ordered_json& j, const char* key, size_t max_items) {
  std::vector<std::string> out;
  if (!present(j, key)) return out;
  const auto& v = j[key];
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto& s : v) {
      if (!s.is_string()) reject(std::string("'") + key + "' must be a string or a list of strings", key);
      out.push_back(s.get<std::string>());
    }
  } else {
    reject(std::string("'") + key + "' must be a string or a list of strings", key);
  }
  if (out.size() > max_items)
    reject(std::string("'") + key + "' has more than " + std::to_string(max_items) + " entries", key);
  for (const auto& s : out)
    if (s.empty()) reject(std::string("'") + key + "' entries must not be empty", key);
  return out;
}

}  // namespace m3
