// Fuzz target for the tokenizer. Valid UTF-8 input must survive encode -> decode (equal to its NFC form,
// with and without special-token parsing); invalid input must be rejected with kInvalidArgument. Every input
// is also read as a sequence of token ids: IncrementalDetokenizer's concatenated output must equal decode()
// and every chunk must be valid UTF-8. The MiniMax-M3 tokenizer is loaded once, from $M3_TOKENIZER or from
// tests/fixtures/minimax-m3/tokenizer.json in the working directory or any parent (the smoke runs in build
// dirs).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

std::string find_tokenizer() {
  if (const char* env = std::getenv("M3_TOKENIZER")) return env;
  std::filesystem::path dir = std::filesystem::current_path();
  for (int up = 0; up < 8; ++up) {
    auto candidate = dir / "tests/fixtures/minimax-m3/tokenizer.json";
    if (std::filesystem::exists(candidate)) return candidate.string();
    if (!dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
  std::fprintf(stderr, "tokenizer_fuzz: set M3_TOKENIZER or run inside the repository\n");
  std::abort();
}

const m3::Tokenizer& tokenizer() {
  static const m3::Tokenizer tok = m3::Tokenizer::load(find_tokenizer());
  return tok;
}

const m3::tok::Normalizer& nfc() {
  static const m3::tok::Normalizer n =
      m3::tok::Normalizer::from_json(nlohmann::json{{"type", "NFC"}}, "fuzz");
  return n;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

void check_streaming(const m3::Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (bool skip : {false, true}) {
    m3::IncrementalDetokenizer detok(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      std::string chunk = detok.push(id);
      check(m3::tok::find_invalid_utf8(chunk) == std::string_view::npos, "push() returned invalid UTF-8");
      streamed += chunk;
    }
    streamed += detok.flush();
    check(streamed == tok.decode(ids, skip), "streamed text differs from decode()");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const m3::Tokenizer& tok = tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  if (m3::tok::find_invalid_utf8(text) == std::string_view::npos) {
    std::string normalized;
    nfc().normalize(text, normalized);
    for (bool parse_special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(text, parse_special);
      for (int32_t id : ids) check(tok.is_known(id), "encode produced an unknown id");
      // Added tokens start and end with ASCII, so normalizing around them equals normalizing the whole.
      check(tok.decode(ids) == normalized, "decode(encode(text)) != NFC(text)");
      check_streaming(tok, ids);
    }
  } else {
    try {
      tok.encode(text);
      check(false, "invalid UTF-8 was accepted");
    } catch (const m3::Error& e) {
      check(e.kind() == m3::ErrorKind::kInvalidArgument, "invalid UTF-8 gave the wrong error kind");
    }
  }

  // The same bytes as ids (3 bytes each), spanning the vocabulary, specials and unknown ids.
  std::vector<int32_t> ids;
  const auto span = static_cast<uint32_t>(tok.vocab_size() + 16);
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const uint32_t v = data[i] | (data[i + 1] << 8) | (static_cast<uint32_t>(data[i + 2]) << 16);
    // Favour the single-byte tokens, which split UTF-8 sequences.
    ids.push_back(static_cast<int32_t>((v & 1) ? (v >> 1) % 256 : (v >> 1) % span) - 8);
  }
  check_streaming(tok, ids);
  return 0;
}
