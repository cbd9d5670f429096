// The special-token strings a chat template sees (bos_token, eos_token), from a model directory's
// tokenizer_config.json, where each is a string or an {"content": ...} object. Missing file or key: "".
#pragma once

#include <string>

namespace m3 {

struct SpecialTokenStrings {
  std::string bos, eos;
};

SpecialTokenStrings load_special_token_strings(const std::string& model_dir);

}  // namespace m3
