// m3_tokenizer_bench: load time of the MiniMax-M3 tokenizer.json, encode/decode throughput, and one long
// prompt (about 1M tokens) encoded on 1, 2, 4, ... threads. Not a test; run from the repository root:
// build/tests/tokenizer/m3_tokenizer_bench [tokenizer.json] [--threads 1,2,4,8,16] [--long-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/parallel_encode.h"
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

// About `bytes` of mixed text: the corpus goldens (code, prose in many scripts, CJK, emoji, digits,
// whitespace runs, chat markers) in a seeded random order, each entry numbered so that repeats are not
// identical.
std::string long_prompt(size_t bytes) {
  const auto corpus = nlohmann::json::parse(read_file("tests/fixtures/tokenizer/corpus_goldens.json"));
  std::vector<std::string> entries;
  for (const auto& e : corpus["entries"]) entries.push_back(e["text"].get<std::string>());
  std::mt19937 rng(1);
  std::string text;
  for (size_t n = 0; text.size() < bytes; ++n) {
    text += entries[rng() % entries.size()];
    text += "\n[" + std::to_string(n) + "]\n";
  }
  return text;
}

// The long prompt encoded with each thread count, its chat markers parsed (many segments between them) and
// not (one 4 MB segment). Every run uses a freshly loaded tokenizer, so neither the segment cache nor the BPE
// word cache holds anything of the prompt (a new, long request). Median of 5 runs.
void bench_long_prompt(const std::string& path, const std::vector<size_t>& thread_counts) {
  const std::string text = long_prompt(4'000'000);
  for (bool parse_special : {true, false}) {
    std::vector<int32_t> reference;
    double base_ms = 0;
    for (size_t threads : thread_counts) {
      std::vector<double> ms;
      std::vector<int32_t> ids;
      for (int run = 0; run < 5; ++run) {
        const m3::Tokenizer tok = m3::Tokenizer::load(path);
        auto t0 = std::chrono::steady_clock::now();
        ids = tok.encode_with_threads(text, threads, parse_special);
        ms.push_back(seconds_since(t0) * 1e3);
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      if (reference.empty()) {
        reference = ids;
        base_ms = median;
      }
      std::printf(
          "long prompt %.2f MB, markers %-7s %zu tokens, %3zu threads (%zu used): %7.1f ms = %6.2f "
          "Mtok/s, x%.2f%s\n",
          text.size() / 1e6, parse_special ? "parsed," : "text,", ids.size(), threads,
          m3::tok::encode_threads(text.size(), threads), median, ids.size() / 1e3 / median, base_ms / median,
          ids == reference ? "" : "  IDS DIFFER");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "tests/fixtures/minimax-m3/tokenizer.json";
  std::vector<size_t> thread_counts;
  bool long_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) thread_counts.push_back(std::stoul(item));
    } else if (std::strcmp(argv[i], "--long-only") == 0) {
      long_only = true;
    } else {
      path = argv[i];
    }
  }
  if (thread_counts.empty()) {
    for (size_t t = 1; t < m3::tok::max_encode_threads(); t *= 2) thread_counts.push_back(t);
    thread_counts.push_back(m3::tok::max_encode_threads());
  }
  if (long_only) {
    bench_long_prompt(path, thread_counts);
    return 0;
  }
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

  // 4. One long prompt on several threads.
  bench_long_prompt(path, thread_counts);
  return bytes == decoded.size() ? 0 : 1;
}
