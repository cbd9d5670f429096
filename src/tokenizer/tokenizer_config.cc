// tokenizer_config.json reading.
#include "tokenizer/tokenizer_config.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace m3 {

SpecialTokenStrings load_special_token_strings(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "tokenizer_config.json");
  if (!in) return {};
  auto j = nlohmann::json::parse(in, nullptr, false);
  auto get = [&](const char* key) -> std::string {
    if (!j.is_object() || !j.contains(key)) return "";
    if (j[key].is_string()) return j[key].get<std::string>();
    if (j[key].is_object() && j[key].contains("content") && j[key]["content"].is_string())
      return j[key]["content"];
    return "";
  };
  return {get("bos_token"), get("eos_token")};
}

}  // namespace m3
