// Test support: a backend that "samples on its device" with the CPU twin of the sampling kernel (sample_rows,
// token masks included, as a GPU backend would) and records what each forward call carried. Header-only:
// sample_rows lives in m3_engine, which the tests that use this link.
#pragma once

#include <memory>
#include <vector>

#include "engine/sampler.h"
#include "model/backend.h"

namespace m3::testing {

class DeviceSamplingBackend : public ModelBackend {
 public:
  struct Call {
    size_t logit_rows = 0;
    std::vector<SamplingRow> rows;
    std::vector<LogitAdjustment> adjustments;
  };
  explicit DeviceSamplingBackend(std::unique_ptr<ModelBackend> inner,
                                 std::shared_ptr<std::vector<Call>> calls = nullptr)
      : inner_(std::move(inner)), calls_(std::move(calls)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  const char* device_name() const override { return "fake-device"; }
  int num_kv_pages() const override { return inner_->num_kv_pages(); }
  bool samples_on_device() const override { return true; }
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options) override {
    ForwardOutput out = inner_->forward(batch, options);
    const size_t rows = out.vocab ? out.logits.size() / out.vocab : 0;
    if (calls_) calls_->push_back({rows, batch.sampling, batch.sampling_adjustments});
    if (!batch.sampling.empty()) {
      const std::vector<uint32_t> none;
      const std::vector<uint32_t>& masks = batch.token_masks ? batch.token_masks() : none;
      out.sampled =
          sample_rows(out.logits, out.vocab, batch.sampling, batch.sampling_adjustments, nullptr, masks);
      out.logits.clear();  // the engine must not need them
    }
    return out;
  }

 private:
  std::unique_ptr<ModelBackend> inner_;
  std::shared_ptr<std::vector<Call>> calls_;
};

}  // namespace m3::testing
