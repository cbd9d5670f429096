// Prefix caching on the CUDA backend: a sequence whose first pages were computed by another (shared pages)
// matches computing it cold within the bf16 rule of the CUDA tests, and pages restored from the host tier
// (pinned host memory, copied back layer by layer beside the forward pass) give exactly what the same pages
// kept on the device give: the copies move bytes, nothing else.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine.h"
#include "gpu/gpu_util.h"
#include "support/engine_run.h"
#include "support/model_fixtures.h"

namespace m3::testing {
namespace {

constexpr double kLogitTol =
    4e-2;  // cuda_model_test.cc's relative bound, logits vs a differently chunked run

std::unique_ptr<ModelBackend> load_cuda(int pages, int host_pages, const std::string& kv = "auto") {
  BackendOptions o;
  o.device = "cuda";
  o.num_kv_pages = pages;
  o.num_host_kv_pages = host_pages;
  o.kv_cache_dtype = kv;
  return load_backend(fixture_model_dir("m3-tiny-block128"), o);
}

TEST(CudaPrefixCache, SharedPagesGiveTheColdResultWithinTheBf16Rule) {
  M3_REQUIRE_GPU();
  auto gpu = load_cuda(64, 0);
  const int vocab = gpu->config().vocab_size;
  const auto head = random_prompt(1024, vocab, 31);  // 8 pages of 128
  std::vector<int32_t> prompt = head;
  for (int32_t t : random_prompt(300, vocab, 32)) prompt.push_back(t);
  SequenceRunner run(*gpu);
  const int cold = run.add_sequence();
  const std::vector<float> want = run.step({{cold, prompt}})[0];
  const int donor = run.add_sequence();
  run.step({{donor, head}});
  const int warm = run.fork_sequence(donor, 8);
  const std::vector<float> got =
      run.step({{warm, std::vector<int32_t>(prompt.begin() + 1024, prompt.end())}})[0];
  const double err = rel_error(got, want);
  std::printf("shared 8 pages + 300 tokens vs cold 1324 tokens: logits rel error %.2e\n", err);
  EXPECT_LT(err, kLogitTol);
}

// Runs the conversation through an engine with prefix caching and a host tier, three times: cold, warm from
// device pages, and warm from pages that other traffic pushed out to the host tier.
void host_tier_round_trip(const std::string& kv) {
  EngineOptions o;
  o.max_num_batched_tokens = 2048;
  Engine e(load_cuda(24, 64, kv), o);  // 24 pages of 128 tokens on the device, 64 on the host
  const int vocab = e.config().vocab_size;
  auto run = [&](const std::vector<int32_t>& prompt, int n, uint64_t salt) {
    Request r;
    r.prompt = prompt;
    r.max_tokens = n;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.sampling.logprobs = 0;
    r.cache_salt = salt;
    return run_alone(e, r);
  };
  const auto conversation = random_prompt(2000, vocab, 41);  // 15 full pages
  const auto cold = run(conversation, 8, 0);
  const auto device = run(conversation, 8, 0);
  EXPECT_EQ(device[0].cached_tokens, 1920);
  for (uint64_t salt : {1, 2}) run(random_prompt(1500, vocab, 50 + uint32_t(salt)), 4, salt);  // turn over
  ASSERT_GT(e.stats().host_pages_used, 0);
  const int64_t host_hits = e.stats().prefix_cache_host_hits;
  const auto host = run(conversation, 8, 0);
  EXPECT_EQ(host[0].cached_tokens, 1920);
  EXPECT_GT(e.stats().prefix_cache_host_hits - host_hits, 1000)
      << "most of the prefix came back from the host";
  ASSERT_EQ(host.size(), device.size());
  int same_as_cold = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(host[i].token, device[i].token) << i;
    EXPECT_EQ(host[i].logprobs->logprob, device[i].logprobs->logprob) << "restored pages are the same bytes";
    same_as_cold += cold[i].token == device[i].token;
  }
  std::printf("kv %s: restored %lld tokens from the host tier; warm greedy ids equal cold at %d/%zu steps\n",
              kv.c_str(), static_cast<long long>(e.stats().prefix_cache_host_hits - host_hits), same_as_cold,
              host.size());
  EXPECT_EQ(e.stats().kv_pages_free, e.stats().kv_pages_total);
}

TEST(CudaPrefixCache, HostTierRestoresAreExact) {
  M3_REQUIRE_GPU();
  host_tier_round_trip("auto");
}

TEST(CudaPrefixCache, HostTierRestoresAreExactWithFp8Pages) {
  M3_REQUIRE_GPU();
  host_tier_round_trip("fp8");
}

}  // namespace
}  // namespace m3::testing
