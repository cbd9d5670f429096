// Field-by-field validation of generation requests: types and ranges are checked here, length limits against
// the model by the engine.
#include "apps/generation_input.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "chat/api/chat_prompt.h"
#include "common/error.h"
#include "media/image_decode.h"
#include "media/image_preprocess.h"

namespace m3 {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& field, const std::string& why) {
  fail(ErrorKind::kInvalidArgument, "'" + field + "' " + why);
}

double number(const json& j, const char* key, double dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number()) bad(key, "must be a number");
  return j[key].get<double>();
}

int64_t integer(const json& j, const char* key, int64_t dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  if (!j[key].is_number_integer()) bad(key, "must be an integer");
  return j[key].get<int64_t>();
}

std::vector<int32_t> token_list(const json& j, const char* key) {
  if (!j[key].is_array()) bad(key, "must be a list of token ids");
  std::vector<int32_t> out;
  for (const json& t : j[key]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      bad(key, "must hold non-negative integer token ids");
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

}  // namespace

GenerationDefaults load_generation_defaults(const std::string& model_dir) {
  GenerationDefaults d;
  std::filesystem::path p = std::filesystem::path(model_dir) / "generation_config.json";
  if (!std::filesystem::exists(p)) return d;
  std::ifstream in(p);
  json g = json::parse(in, nullptr, false);
  if (g.is_discarded() || !g.is_object()) fail(ErrorKind::kCorruptData, p.string() + ": not a JSON object");
  d.sampling.temperature = static_cast<float>(number(g, "temperature", d.sampling.temperature));
  d.sampling.top_p = static_cast<float>(number(g, "top_p", d.sampling.top_p));
  d.sampling.top_k = static_cast<int>(integer(g, "top_k", d.sampling.top_k));
  if (g.contains("do_sample") && g["do_sample"] == false) d.sampling.temperature = 0;
  if (g.contains("max_new_tokens")) {  // vLLM takes it as the default max_tokens
    const int64_t n = integer(g, "max_new_tokens", 0);
    if (n < 1 || n > (1 << 30))
      fail(ErrorKind::kCorruptData, p.string() + ": max_new_tokens must be a positive integer");
    d.max_new_tokens = static_cast<int>(n);
  }
  return d;
}

GenerationRequest parse_generation_request(const json& j, const GenerationDefaults& d, const Tokenizer* tok,
                                           const PromptModel* chat) {
  if (!j.is_object()) fail(ErrorKind::kInvalidArgument, "a request must be a JSON object");
  GenerationRequest out;
  Request& r = out.request;
  if (j.contains("prompt_token_ids")) {
    r.prompt = token_list(j, "prompt_token_ids");
  } else if (j.contains("prompt")) {
    if (!tok)
      fail(ErrorKind::kInvalidArgument, "'prompt' text needs a tokenizer, which this model directory lacks");
    if (!j["prompt"].is_string()) bad("prompt", "must be a string");
    r.prompt = tok->encode(j["prompt"].get<std::string>());
  } else if (j.contains("messages")) {
    if (!chat)
      fail(ErrorKind::kInvalidArgument,
           "'messages' need a tokenizer and a chat template, which this model lacks");
    r.prompt = render_chat_prompt(*chat, j["messages"], j.contains("tools") ? j["tools"] : json(),
                                  j.value("add_generation_prompt", true),
                                  j.contains("chat_template_kwargs") ? j["chat_template_kwargs"] : json())
                   .ids;
  } else {
    fail(ErrorKind::kInvalidArgument, "missing 'prompt_token_ids' (or 'prompt' / 'messages')");
  }
  int64_t max_tokens = integer(j, "max_tokens", d.max_new_tokens.value_or(16));
  if (max_tokens < 1 || max_tokens > (1 << 30)) bad("max_tokens", "must be a positive integer");
  r.max_tokens = static_cast<int>(max_tokens);
  r.sampling.temperature = static_cast<float>(number(j, "temperature", d.sampling.temperature));
  r.sampling.top_p = static_cast<float>(number(j, "top_p", d.sampling.top_p));
  r.sampling.top_k = static_cast<int>(integer(j, "top_k", d.sampling.top_k));
  r.sampling.min_p = static_cast<float>(number(j, "min_p", 0.0));
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) bad("seed", "must be an integer");
    r.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
    if (!j["ignore_eos"].is_boolean()) bad("ignore_eos", "must be a boolean");
    r.ignore_eos = j["ignore_eos"].get<bool>();
  }
  if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null())
    r.stop_token_ids = token_list(j, "stop_token_ids");
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (!tok)
      fail(ErrorKind::kInvalidArgument, "'stop' strings need a tokenizer, which this model directory lacks");
    if (s.is_string())
      out.stop.push_back(s.get<std::string>());
    else if (s.is_array())
      for (const json& x : s) {
        if (!x.is_string() || x.get<std::string>().empty()) bad("stop", "must hold non-empty strings");
        out.stop.push_back(x.get<std::string>());
      }
    else
      bad("stop", "must be a string or a list of strings");
  }
  // Images (files) for the prompt's image placeholders, in order: their features replace the placeholders'
  // embeddings (engine/multimodal.h). The prompt carries the expanded placeholders, as the processor writes
  // them.
  if (j.contains("images") && !j["images"].is_null()) {
    if (!j["images"].is_array()) bad("images", "must be a list of image file paths");
    for (const json& f : j["images"]) {
      if (!f.is_string()) bad("images", "must hold file paths");
      std::ifstream in(f.get<std::string>(), std::ios::binary);
      if (!in) fail(ErrorKind::kInvalidArgument, "images: cannot read '" + f.get<std::string>() + "'");
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
      MultimodalInput item;
      item.patches = media::preprocess_image(media::decode_image(bytes));
      item.hash = multimodal_hash(item.patches);
      r.mm.push_back(std::move(item));
    }
  }
  return out;
}

}  // namespace m3
