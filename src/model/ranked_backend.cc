// Rank 0's side (load, then a backend that posts each step) and the workers' call loop.
#include "model/ranked_backend.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/log.h"
#include "dist/rank_protocol.h"

namespace m3 {
namespace {

std::string encode_options(const BackendOptions& o) {
  return nlohmann::json{{"device", o.device},
                        {"num_kv_pages", o.num_kv_pages},
                        {"num_host_kv_pages", o.num_host_kv_pages},
                        {"expert_parallel", o.expert_parallel},
                        {"data_parallel", o.data_parallel},
                        {"expert_placement", o.expert_placement},
                        {"gpu_memory_utilization", o.gpu_memory_utilization},
                        {"max_num_batched_tokens", o.max_num_batched_tokens},
                        {"max_num_seqs", o.max_num_seqs},
                        {"max_model_len", o.max_model_len},
                        {"enforce_eager", o.enforce_eager},
                        {"load_format", o.load_format},
                        {"quantization", o.quantization},
                        {"kv_cache_dtype", o.kv_cache_dtype}}
      .dump();
}

BackendOptions decode_options(const std::string& bytes, std::shared_ptr<dist::Communicator> comm) {
  const auto j = nlohmann::json::parse(bytes);
  BackendOptions o;
  o.device = j.at("device");
  o.num_kv_pages = j.at("num_kv_pages");
  o.num_host_kv_pages = j.at("num_host_kv_pages");
  o.expert_parallel = j.at("expert_parallel");
  o.data_parallel = j.at("data_parallel");
  o.expert_placement = j.at("expert_placement").get<std::vector<int32_t>>();
  o.gpu_memory_utilization = j.at("gpu_memory_utilization");
  o.max_num_batched_tokens = j.at("max_num_batched_tokens");
  o.max_num_seqs = j.at("max_num_seqs");
  o.max_model_len = j.at("max_model_len");
  o.enforce_eager = j.at("enforce_eager");
  o.load_format = j.at("load_format");
  o.quantization = j.at("quantization");
  o.kv_cache_dtype = j.at("kv_cache_dtype");
  o.comm = std::move(comm);
  return o;
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

// Every rank loads its shard, then all learn each rank's outcome: its KV page count and memory, or its error.
// On success rank 0 logs each rank's memory; *min_pages is the smallest pool (CUDA ranks size theirs from
// their own free memory), which bounds the page ids rank 0's scheduler hands out.
std::unique_ptr<ModelBackend> load_and_agree(const std::string& model_dir, const BackendOptions& options,
                                             std::string* first_failure, int* min_pages) {
  dist::Communicator& comm = *options.comm;
  std::unique_ptr<ModelBackend> shard;
  std::string outcome;
  try {
    shard = load_shard(model_dir, options);
    const MemoryUse m = shard->memory_use();
    outcome = "ok\t" + std::to_string(shard->num_kv_pages()) + "\tweights " + mib(m.weights) + ", KV cache " +
              mib(m.kv) + " (" + std::to_string(shard->num_kv_pages()) + " pages)";
  } catch (const std::exception& e) {
    outcome = std::string("error\t") + e.what();
  }
  *min_pages = shard ? shard->num_kv_pages() : 0;
  for (const std::string& line : comm.all_gather_strings(comm.describe() + "\t" + outcome)) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    const std::string who = line.substr(0, a), status = line.substr(a + 1, b - a - 1);
    if (status == "error") {
      if (first_failure->empty()) *first_failure = who + ": " + line.substr(b + 1);
      continue;
    }
    const size_t c = line.find('\t', b + 1);
    *min_pages = std::min(*min_pages, std::stoi(line.substr(b + 1, c - b - 1)));
    if (comm.rank() == 0) log_info(who, ": ", line.substr(c + 1));
  }
  if (!first_failure->empty()) shard.reset();
  return shard;
}

class RankedBackend final : public ModelBackend {
 public:
  RankedBackend(std::unique_ptr<ModelBackend> shard, std::shared_ptr<dist::Communicator> comm, int pages)
      : shard_(std::move(shard)), comm_(std::move(comm)), pages_(pages) {}
  // The workers leave their loop and release their shards while this rank releases its own: NCCL's teardown
  // waits for every rank.
  ~RankedBackend() override {
    try {
      dist::post_shutdown(*comm_);
    } catch (...) {  // a lost rank: the fault path ends the run
    }
  }
  const ModelConfig& config() const override { return shard_->config(); }
  const char* device_name() const override { return shard_->device_name(); }
  int num_kv_pages() const override { return pages_; }                            // what every rank holds
  int num_host_kv_pages() const override { return shard_->num_host_kv_pages(); }  // the same on every rank
  bool samples_on_device() const override { return shard_->samples_on_device(); }
  MemoryUse memory_use() const override { return shard_->memory_use(); }
  int data_parallel_size() const override { return shard_->data_parallel_size(); }
  // Rank 0 routes every token of the step (with DP attention, the gathered batch), so its counts are whole.
  std::vector<int64_t> expert_token_counts() const override { return shard_->expert_token_counts(); }
  ForwardOutput forward(const ForwardBatch& batch, const ForwardOptions& options) override {
    dist::post_call(*comm_, dist::RankCall::kForward, encode_forward_call(batch, options));
    return shard_->forward(batch, options);
  }

 private:
  std::unique_ptr<ModelBackend> shard_;
  std::shared_ptr<dist::Communicator> comm_;
  int pages_;
};

}  // namespace

std::unique_ptr<ModelBackend> load_on_ranks(const std::string& model_dir, const BackendOptions& options) {
  M3_CHECK(options.comm && options.comm->rank() == 0, "load_on_ranks runs on rank 0");
  dist::post_call(*options.comm, dist::RankCall::kLoad, encode_options(options));
  std::string failure;
  int pages = 0;
  auto shard = load_and_agree(model_dir, options, &failure, &pages);
  if (!failure.empty()) fail(ErrorKind::kInvalidArgument, failure);
  return std::make_unique<RankedBackend>(std::move(shard), options.comm, pages);
}

int serve_rank_calls(const std::string& model_dir, std::shared_ptr<dist::Communicator> comm) {
  std::unique_ptr<ModelBackend> shard;
  std::string payload;
  for (;;) {
    switch (dist::wait_call(*comm, &payload)) {
      case dist::RankCall::kShutdown:
        return 0;
      case dist::RankCall::kLoad: {
        std::string failure;  // rank 0 reports it
        int pages = 0;
        shard = load_and_agree(model_dir, decode_options(payload, comm), &failure, &pages);
        break;
      }
      case dist::RankCall::kForward: {
        try {
          M3_CHECK(shard != nullptr, "a forward call before the model loaded");
          const ForwardCall call = decode_forward_call(payload);
          shard->forward(call.batch, call.options);
        } catch (const std::exception& e) {
          comm->abort(std::string("forward pass failed: ") + e.what());
        }
        break;
      }
    }
  }
}

}  // namespace m3
