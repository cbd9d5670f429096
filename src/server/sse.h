// Small helpers for responses: SSE framing, ids, and answering a request from GenerationRuns: a stream of
// events (SSE) or one JSON body, produced as the engine's events arrive, with a client disconnect cancelling
// the runs.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/generation_run.h"

namespace m3 {

std::string random_id(const std::string& prefix, int hex_chars = 32);
int64_t unix_time();

// `data: <json>\n\n` (OpenAI) or `event: <type>\ndata: <json>\n\n` (Anthropic).
std::string sse_data(const nlohmann::json& j);
std::string sse_event(const std::string& type, const nlohmann::json& j);

// Defers `res`: the runs' deltas go through `on_delta`, which returns text; `finish` returns the trailing
// text (final chunk, usage, [DONE] or the full JSON body). With content type text/event-stream the text is
// written as it comes (chunked); otherwise it is collected and sent as one body when the last run ends. Runs
// are delivered one after the other (they compute concurrently). A client that leaves cancels them.
void respond_with_runs(Reply& res, const std::string& content_type,
                       std::vector<std::shared_ptr<GenerationRun>> runs,
                       std::function<std::string(size_t run, int choice, OutputDelta&)> on_delta,
                       std::function<std::string()> finish);

}  // namespace m3
