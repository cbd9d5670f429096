// Stop strings are searched in the held text plus the new text; everything before the last (longest stop - 1)
// bytes, cut back to a UTF-8 boundary, is released.
#include "server/output_processor.h"

#include <algorithm>

namespace m3 {
namespace {

// Largest prefix length <= n of `s` that does not end inside a UTF-8 sequence.
size_t utf8_floor(const std::string& s, size_t n) {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

// The reasoning and tool-call markers are special tokens, so a detokenizer that skips special tokens would
// hide them from the parsers: with a parser active, special tokens are dropped here instead, all but the
// markers that parser reads.
OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, TextOptions options)
    : detok_(tokenizer, options.skip_special_tokens && !options.reasoning && !options.tools),
      opt_(std::move(options)),
      tok_(tokenizer) {
  for (const std::string& s : opt_.stop) max_stop_ = std::max(max_stop_, s.size());
  if (opt_.reasoning) reasoning_.emplace(*opt_.reasoning);
  if (opt_.tools) tools_.emplace(*opt_.tools);
  std::vector<std::string_view> keep;
  if (reasoning_) keep.insert(keep.end(), {kThinkOpen, kThinkClose});
  if (tools_) keep.insert(keep.end(), {kMinimaxNamespace, "<tool_call>", "</tool_call>"});
  for (std::string_view m : keep)
    if (auto id = tok_.token_to_id(m)) markers_.push_back(*id);
}

void OutputProcessor::route(const std::string& text, bool eof, bool truncated, OutputDelta& out) {
  std::string content = text;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->push(text);
    if (eof) {
      ReasoningDelta tail = reasoning_->finish();
      r.reasoning += tail.reasoning;
      r.content += tail.content;
    }
    out.reasoning += r.reasoning;
    content = std::move(r.content);
  }
  if (tools_) {
    ToolDelta t = tools_->push(content);
    if (eof) {
      ToolDelta tail = tools_->finish();
      t.content += tail.content;
      if (!truncated) t.tool_calls.insert(t.tool_calls.end(), tail.tool_calls.begin(), tail.tool_calls.end());
    }
    out.content += t.content;
    out.tool_calls.insert(out.tool_calls.end(), t.tool_calls.begin(), t.tool_calls.end());
  } else {
    out.content += content;
  }
}

OutputDelta OutputProcessor::on_event(const TokenEvent& ev) {
  OutputDelta out;
  if (finished_) return out;
  if (ev.token >= 0) {
    ++num_tokens_;
    if (reasoning_ && reasoning_->in_reasoning()) ++reasoning_tokens_;
    out.token_ids.push_back(ev.token);
    if (ev.logprobs) out.logprobs.push_back(*ev.logprobs);
    const bool dropped = opt_.skip_special_tokens && (reasoning_ || tools_) && tok_.is_special(ev.token) &&
                         std::find(markers_.begin(), markers_.end(), ev.token) == markers_.end();
    if (!dropped) held_ += detok_.push(ev.token);
  }
  const bool engine_done = ev.finish != FinishReason::kNone;
  if (engine_done) held_ += detok_.flush();

  // Earliest stop string in the held text.
  size_t hit = std::string::npos, hit_len = 0;
  for (const std::string& s : opt_.stop) {
    if (s.empty()) continue;
    size_t at = held_.find(s);
    if (at != std::string::npos && at < hit) {
      hit = at;
      hit_len = s.size();
      out.stop_reason = s;
    }
  }
  std::string release;
  if (hit != std::string::npos) {
    release = held_.substr(0, hit + (opt_.include_stop_str_in_output ? hit_len : 0));
    held_.clear();
    stop_hit_ = true;
  } else if (engine_done) {
    release.swap(held_);
  } else {
    const size_t keep = max_stop_ > 0 ? max_stop_ - 1 : 0;
    const size_t cut = held_.size() > keep ? utf8_floor(held_, held_.size() - keep) : 0;
    release = held_.substr(0, cut);
    held_.erase(0, cut);
  }
  finished_ = stop_hit_ || engine_done;
  route(release, finished_,
        !stop_hit_ && (ev.finish == FinishReason::kLength || ev.finish == FinishReason::kAbort), out);
  if (!finished_) return out;

  out.finished = true;
  if (stop_hit_) {
    out.finish_reason = "stop";
  } else {
    switch (ev.finish) {
      case FinishReason::kStop:
        out.finish_reason = "stop";
        if (ev.stop_token >= 0 && !ev.is_eos) out.stop_reason = ev.stop_token;
        break;
      case FinishReason::kLength:
        out.finish_reason = "length";
        break;
      default:
        out.finish_reason = "abort";
        break;
    }
  }
  if (out.finish_reason == "stop" && tool_call_count() > 0) out.finish_reason = "tool_calls";
  return out;
}

}  // namespace m3
