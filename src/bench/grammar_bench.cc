// The grammar benchmark: workloads from the command line, compile, lockstep random walks, percentiles.
#include "bench/grammar_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "grammar/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace m3::bench {
namespace {

using grammar::StructuredOutputSpec;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::kNotFound, path + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidArgument, path + ": not JSON (" + e.what() + ")");
  }
}

struct Workload {
  std::string name;
  StructuredOutputSpec spec;
};

std::vector<Workload> workloads(const GrammarBenchOptions& o) {
  std::vector<Workload> out;
  out.push_back({"json_object", StructuredOutputSpec{}});
  for (const std::string& path : o.schemas) {
    StructuredOutputSpec s;
    s.kind = StructuredOutputSpec::Kind::kJsonSchema;
    s.schema = read_json(path);
    out.push_back({"schema " + path.substr(path.find_last_of('/') + 1), std::move(s)});
  }
  for (const std::string& path : o.tools) {
    json doc = read_json(path);
    if (doc.contains("requests")) doc = doc["requests"][0]["body"];
    if (doc.is_object() && doc.contains("tools")) doc = doc["tools"];
    if (!doc.is_array()) fail(ErrorKind::kInvalidArgument, path + ": no list of tools found");
    StructuredOutputSpec s;
    s.kind = StructuredOutputSpec::Kind::kToolCall;
    for (const json& t : doc) {
      const json& f = t.contains("function") ? t["function"] : t;
      grammar::ToolSpec tool;
      tool.name = f.at("name").get<std::string>();
      if (f.contains("input_schema")) tool.parameters = f["input_schema"];
      if (f.contains("parameters")) tool.parameters = f["parameters"];
      // Each tool's arguments as a JSON schema workload too (what strict tools and response formats compile).
      StructuredOutputSpec js;
      js.kind = StructuredOutputSpec::Kind::kJsonSchema;
      js.schema = tool.parameters;
      out.push_back({"tool " + tool.name + " (JSON)", std::move(js)});
      s.tools.push_back(std::move(tool));
    }
    out.push_back({"tool calls " + path.substr(path.find_last_of('/') + 1), std::move(s)});
  }
  return out;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct WalkResult {
  std::vector<double> token_us;  // one mask, one row
  std::vector<double> step_us;   // a whole batch's masks
  int completed = 0;             // structures completed (rows restarted)
};

// B rows in lockstep: each step fills the batch's masks (timed as a batch), times one row's mask alone, and
// moves each row by a random allowed token.
WalkResult walk(const grammar::TokenGrammar& g, int batch, int steps, uint32_t seed) {
  const int32_t words = g.vocab().words();
  std::vector<grammar::Matcher> rows(batch, g.matcher());
  std::vector<uint32_t> masks(static_cast<size_t>(batch) * words);
  std::mt19937 rng(seed);
  grammar::MaskWorkers workers;  // as the engine fills a batch's masks
  WalkResult r;
  for (int step = 0; step < steps; ++step) {
    std::vector<grammar::MaskJob> jobs;
    for (grammar::Matcher& m : rows) jobs.push_back({&g, &m, {}});
    const auto t = Clock::now();
    workers.submit(std::move(jobs), words, masks.data());
    workers.wait();
    r.step_us.push_back(since(t) * 1e6);
    for (int b = 0; b < batch; ++b) {
      uint32_t* row = masks.data() + static_cast<size_t>(b) * words;
      if (b == 0) {  // one row alone, as the p50 / p99 per token
        std::vector<uint32_t> again(words);
        const auto t1 = Clock::now();
        g.fill_mask(rows[b], again.data());
        r.token_us.push_back(since(t1) * 1e6);
      }
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < g.vocab().size(); ++id)
        if ((row[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
      const auto& stops = g.vocab().stop_ids();
      const int32_t pick = allowed.empty() ? -1 : allowed[rng() % allowed.size()];
      if (pick < 0 || std::find(stops.begin(), stops.end(), pick) != stops.end()) {
        rows[b] = g.matcher();
        ++r.completed;
        continue;
      }
      if (!rows[b].accept(g.vocab().bytes(pick)))
        fail(ErrorKind::kInternal,
             "the mask allowed token " + std::to_string(pick) + ", which the grammar refuses");
    }
  }
  return r;
}

}  // namespace

int run_grammar_benchmark(const GrammarBenchOptions& o) {
  const Tokenizer tok = Tokenizer::load(o.tokenizer);
  const auto t0 = Clock::now();
  auto vocab = grammar::Vocabulary::from_tokenizer(tok, o.stop_ids);
  std::vector<int32_t> specials;
  for (const char* tag : {"<tool_call>", "</tool_call>", "]<]minimax[>["})
    if (const auto id = tok.token_to_id(tag)) specials.push_back(*id);
  grammar::GrammarCache cache(vocab, specials);
  std::printf("vocabulary: %d ids, indexed in %.1f ms; %u hardware threads\n", vocab->size(), since(t0) * 1e3,
              std::thread::hardware_concurrency());
  std::printf("%-34s %10s %9s %11s %10s %10s", "grammar", "compile ms", "positions", "uncertain",
              "mask p50 us", "p99 us");
  for (int b : o.batch_sizes) std::printf("  B=%-3d step us p50/p99", b);
  std::printf("\n");
  json results = json::array();
  for (const Workload& w : workloads(o)) {
    const auto t = Clock::now();
    const auto g = cache.get(w.spec);
    const double compile_ms = since(t) * 1e3;
    const grammar::CompileStats& st = g->stats();
    json row = {{"grammar", w.name},
                {"compile_ms", compile_ms},
                {"positions", st.positions},
                {"accepted_pairs", st.accepted},
                {"uncertain_pairs", st.uncertain}};
    std::vector<double> token_us;
    std::string batch_cols;
    for (int b : o.batch_sizes) {
      const WalkResult r = walk(*g, b, o.steps, o.seed + static_cast<uint32_t>(b));
      if (token_us.empty()) token_us = r.token_us;
      char buf[96];
      std::snprintf(buf, sizeof buf, "  %10.0f / %-10.0f", percentile(r.step_us, 0.5),
                    percentile(r.step_us, 0.99));
      batch_cols += buf;
      row["batch_" + std::to_string(b)] = {{"step_us_p50", percentile(r.step_us, 0.5)},
                                           {"step_us_p99", percentile(r.step_us, 0.99)},
                                           {"completed", r.completed}};
    }
    row["mask_us_p50"] = percentile(token_us, 0.5);
    row["mask_us_p99"] = percentile(token_us, 0.99);
    std::printf("%-34.34s %10.1f %9d %11lld %10.1f %10.1f%s\n", w.name.c_str(), compile_ms, st.positions,
                static_cast<long long>(st.uncertain), percentile(token_us, 0.5), percentile(token_us, 0.99),
                batch_cols.c_str());
    results.push_back(std::move(row));
  }
  if (!o.result_json.empty()) {
    std::ofstream out(o.result_json);
    if (!out) fail(ErrorKind::kInvalidArgument, o.result_json + ": cannot write");
    out << results.dump(2) << "\n";
  }
  return 0;
}

}  // namespace m3::bench
