// Runs a libFuzzer target without libFuzzer (for compilers that lack it): replays every file of the seed
// corpus, then N deterministic mutations of them (bit flips, truncations, splices, byte insertions).
// Usage: <target> CORPUS_DIR [ITERATIONS]. Any crash or uncaught exception fails the run.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [ITERATIONS]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(entry.path(), std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (seeds.empty()) seeds.emplace_back();
  for (const auto& s : seeds) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  long iterations = argc > 2 ? std::atol(argv[2]) : 1000;
  std::mt19937_64 rng(12345);
  for (long i = 0; i < iterations; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 5) {
        case 0:
          if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:
          if (!s.empty()) s.resize(rng() % s.size());
          break;
        case 2:
          s.insert(s.begin() + (s.empty() ? 0 : rng() % s.size()), static_cast<char>(rng()));
          break;
        case 3: {
          const std::string& o = seeds[rng() % seeds.size()];
          if (!o.empty()) s += o.substr(rng() % o.size());
          break;
        }
        case 4:
          if (s.size() > 1) {
            size_t a = rng() % s.size(), b = rng() % s.size();
            std::swap(s[a], s[b]);
          }
          break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::printf("%zu seeds, %ld mutated inputs: no crash\n", seeds.size(), iterations);
  return 0;
}
