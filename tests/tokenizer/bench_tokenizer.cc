// m3_tokenizer_bench: load time of the MiniMax-M3 tokenizer.json and encode/decode throughput. Not a test;
// run from the repository root: build/tests/tokenizer/m3_tokenizer_bench [tokenizer.json].
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Encodes `text` in chunks of about `chunk` bytes (split at line ends, like requests) and reports MB/s.
void bench_encode(const m3::Tokenizer& tok, const std::string& name, const std::string& text, size_t chunk) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < text.size();) {
    size_t end = std::min(text.size(), i + chunk);
    while (end < text.size() && text[end - 1] != '\n') ++end;
    parts.push_back(text.substr(i, end - i));
    i = end;
  }
  for (int pass = 0; pass < 2; ++pass) {
    size_t tokens = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& p : parts) tokens += tok.encode(p).size();
    double s = seconds_since(t0);
    std::printf("encode %-28s %s: %7.2f MB in %6.3f s = %7.2f MB/s, %zu tokens (%.2f bytes/token)\n",
                name.c_str(), pass == 0 ? "cold" : "warm", text.size() / 1e6, s, text.size() / 1e6 / s,
                tokens, static_cast<double>(text.size()) / static_cast<double>(tokens));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "tests/fixtures/minimax-m3/tokenizer.json";
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    m3::Tokenizer t = m3::Tokenizer::load(path);
    best = std::min(best, seconds_since(t0));
  }
  std::printf("load %s: best of 3 = %.1f ms\n", path.c_str(), best * 1e3);
  const m3::Tokenizer tok = m3::Tokenizer::load(path);

  // 1. The tokenizer.json text itself: escaped JSON full of rare byte-level spellings.
  const std::string file_text = read_file(path);
  bench_encode(tok, "tokenizer.json text", file_text, 64 * 1024);

  // 2. The golden texts (English, code, CJK, emoji, ...) repeated to about 8 MB.
  std::string mixed;
  {
    const auto goldens = nlohmann::json::parse(read_file("tests/fixtures/minimax-m3/goldens.json"));
    std::string one;
    for (const auto& e : goldens["texts"]) one += e["text"].get<std::string>() + "\n";
    while (mixed.size() < 8'000'000) mixed += one;
  }
  bench_encode(tok, "goldens texts x N", mixed, 16 * 1024);

  // 3. Decode and streaming decode of the mixed ids.
  const auto ids = tok.encode(mixed);
  auto t0 = std::chrono::steady_clock::now();
  std::string decoded = tok.decode(ids);
  double s = seconds_since(t0);
  std::printf("decode: %zu tokens in %.3f s = %.1f Mtok/s\n", ids.size(), s, ids.size() / 1e6 / s);
  t0 = std::chrono::steady_clock::now();
  m3::IncrementalDetokenizer detok(tok, false);
  size_t bytes = 0;
  for (int32_t id : ids) bytes += detok.push(id).size();
  bytes += detok.flush().size();
  s = seconds_since(t0);
  std::printf("incremental detokenize: %zu tokens in %.3f s = %.1f Mtok/s (%s)\n", ids.size(), s,
              ids.size() / 1e6 / s, bytes == decoded.size() ? "matches decode" : "MISMATCH");
  return bytes == decoded.size() ? 0 : 1;
}
