// Small helpers for responses: SSE framing, ids, and running a GenerationRun inside a cpp-httplib chunked
// content provider (which is where a client disconnect becomes visible).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/generation_run.h"

namespace httplib {
class DataSink;
struct Response;
}  // namespace httplib

namespace m3 {

std::string random_id(const std::string& prefix, int hex_chars = 32);
int64_t unix_time();

// `data: <json>\n\n` (OpenAI) or `event: <type>\ndata: <json>\n\n` (Anthropic).
std::string sse_data(const nlohmann::json& j);
std::string sse_event(const std::string& type, const nlohmann::json& j);

// Streams the runs' deltas through `on_delta`, which returns text to write; `finish` returns the trailing
// text (final chunk, usage, [DONE] or the full JSON body). Writes happen as they come; a failed write or a
// closed socket aborts the runs.
void respond_with_runs(httplib::Response& res, const std::string& content_type,
                       std::vector<std::shared_ptr<GenerationRun>> runs,
                       std::function<std::string(size_t run, int choice, OutputDelta&)> on_delta,
                       std::function<std::string()> finish);

}  // namespace m3
