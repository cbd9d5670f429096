// Prefixes are fitted first, each on its own generator; then every request's suffix is fitted after its
// prefix's text, so the prefix ids survive the concatenation. The shuffle uses the run seed's generator.
#include "bench/prefix_repetition_dataset.h"

#include <algorithm>
#include <string>
#include <utility>

#include "bench/random_text.h"
#include "common/error.h"
#include "common/log.h"

namespace m3::bench {
namespace {

[[noreturn]] void bad_flag(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

void check(const PrefixRepetitionOptions& opt) {
  if (opt.num_prompts < 1) bad_flag("--num-prompts must be at least 1");
  if (opt.prefix_len < 0) bad_flag("--prefix-repetition-prefix-len must not be negative");
  if (opt.suffix_len < 0) bad_flag("--prefix-repetition-suffix-len must not be negative");
  if (opt.prefix_len + opt.suffix_len < 1)
    bad_flag(
        "--prefix-repetition-prefix-len and --prefix-repetition-suffix-len are both 0: a prompt would "
        "have no tokens");
  if (opt.num_prefixes < 1) bad_flag("--prefix-repetition-num-prefixes must be at least 1");
  if (opt.output_len < 1) bad_flag("--prefix-repetition-output-len must be at least 1");
  if (opt.num_prompts < opt.num_prefixes)
    bad_flag("--num-prompts (" + std::to_string(opt.num_prompts) +
             ") must be at least --prefix-repetition-num-prefixes (" + std::to_string(opt.num_prefixes) +
             ")");
}

}  // namespace

std::vector<SampleRequest> sample_prefix_repetition_requests(const Tokenizer& tok,
                                                             const PrefixRepetitionOptions& opt) {
  check(opt);
  const RandomText random(tok);

  struct Prefix {
    std::string text;
    std::vector<int32_t> ids;
    bool exact = false;
  };
  std::vector<Prefix> prefixes(static_cast<size_t>(opt.num_prefixes));
  parallel_for(opt.num_prefixes, [&](int p) {
    Rng rng(mix_seed(opt.seed, static_cast<uint64_t>(p)));
    const FittedText f = random.draw("", {}, static_cast<size_t>(opt.prefix_len), rng);
    prefixes[p] = {f.text, tok.encode(f.text), f.exact};
  });

  // Request i belongs to prefix i % num_prefixes: the counts differ by at most one.
  std::vector<SampleRequest> requests(static_cast<size_t>(opt.num_prompts));
  std::vector<char> exact(requests.size(), 0);
  parallel_for(opt.num_prompts, [&](int i) {
    const Prefix& prefix = prefixes[static_cast<size_t>(i % opt.num_prefixes)];
    Rng rng(mix_seed(opt.seed, static_cast<uint64_t>(opt.num_prefixes + i)));
    const FittedText f = random.draw(prefix.text, prefix.ids, static_cast<size_t>(opt.suffix_len), rng);
    requests[i] = {prefix.text + f.text, static_cast<int>(prefix.ids.size() + f.tokens), opt.output_len};
    exact[i] = prefix.exact && f.exact;
  });

  const auto inexact = std::count(exact.begin(), exact.end(), 0);
  if (inexact > 0)
    log_warn(inexact, " of ", opt.num_prompts, " prefix_repetition prompts do not encode to ",
             opt.prefix_len + opt.suffix_len, " tokens");

  Rng shuffle(opt.seed);  // Fisher-Yates on the portable generator
  for (size_t i = requests.size() - 1; i > 0; --i)
    std::swap(requests[i], requests[static_cast<size_t>(shuffle.uniform(0, static_cast<int64_t>(i)))]);
  return requests;
}

}  // namespace m3::bench
