// The "agent" workload of `m3 bench serve` (m3serve's own): N concurrent multi-turn conversations that share
// one long system prompt (a coding agent's instructions + tools). Turn t+1 of a conversation is sent only
// after turn t completed; its prompt is turn t's prompt + turn t's generated text + a new random user chunk
// (completions), or the growing message list system, user, assistant, user, ... (chat). So every turn after
// the first repeats its conversation so far, and every turn repeats the system prompt: the load of prefix
// caching. Conversation starts follow the run's arrival times; --max-concurrency bounds requests in flight.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/request_client.h"
#include "bench/sample_request.h"
#include "tokenizer/tokenizer.h"

namespace m3::bench {

struct AgentWorkloadOptions {
  int conversations = 8;  // --agent-conversations
  int turns = 8;          // --agent-turns
  int system_len = 8192;  // --agent-system-len: tokens of the shared system prompt
  int turn_len = 1024;    // --agent-turn-len: tokens of new user text per turn
  int output_len = 128;   // --agent-output-len: max_tokens per turn
  uint64_t seed = 0;
};

// One request of a run: its place, what was sent, what came back.
struct AgentTurn {
  int conversation = 0;
  int turn = 0;
  SampleRequest request;
  RequestOutput output;
};

class AgentWorkload {
 public:
  // Draws the system prompt and every user chunk (random text, random_text.h): the system prompt encodes to
  // system_len tokens, a first turn to system_len + turn_len. Throws m3::Error(kInvalidArgument) naming the
  // flag for counts below 1 or negative lengths.
  AgentWorkload(const Tokenizer& tok, const AgentWorkloadOptions& opt);

  const AgentWorkloadOptions& options() const { return opt_; }
  size_t num_requests() const { return static_cast<size_t>(opt_.conversations) * opt_.turns; }

  // Turn 0 of `conversation`: the system prompt and its first user chunk.
  SampleRequest first_turn(int conversation) const;
  // Turn `turn` (>= 1) of `conversation` after the previous turn `prev` answered `out`. Its prompt_len is
  // the sum of its pieces' token counts (the server's usage.prompt_tokens replaces it when sent).
  SampleRequest next_turn(int conversation, int turn, const SampleRequest& prev,
                          const RequestOutput& out) const;

  // Runs every conversation through `client` and returns the turns in conversation-major order (index
  // conversation * turns + turn). Conversation c starts `starts[c]` seconds after `epoch` (the client's
  // epoch); a turn is due when the previous one completed. After a failed turn the conversation's later turns
  // are not sent and fail with a message saying why. `on_done` sees every turn's output, sent or not, on any
  // thread (the client's I/O threads included), so it must not block. Request ids are
  // id_prefix + "<conversation>-<turn>".
  std::vector<AgentTurn> run(const RequestClient& client, size_t max_in_flight,
                             const std::vector<double>& starts, std::chrono::steady_clock::time_point epoch,
                             const std::string& id_prefix,
                             const std::function<void(const RequestOutput&)>& on_done) const;

 private:
  Tokenizer tok_;
  AgentWorkloadOptions opt_;
  std::string system_;
  int system_tokens_ = 0;
  std::vector<std::string> user_;  // [conversation * turns + turn]
  std::vector<int> user_tokens_;   // likewise
};

}  // namespace m3::bench
