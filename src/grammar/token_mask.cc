// The vocabulary index, the per-position precompute and the run-time mask.
#include "grammar/token_mask.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace m3::grammar {

namespace {

void set_bit(uint32_t* mask, int32_t id) {
  mask[id >> 5] |= uint32_t{1} << (id & 31);
}
void clear_bit(uint32_t* mask, int32_t id) {
  mask[id >> 5] &= ~(uint32_t{1} << (id & 31));
}
bool get_bit(const uint32_t* mask, int32_t id) {
  return (mask[id >> 5] >> (id & 31)) & 1;
}

size_t common_prefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<char> special,
                       std::vector<int32_t> stop_ids)
    : bytes_(std::move(token_bytes)), special_(std::move(special)), stop_ids_(std::move(stop_ids)) {
  M3_CHECK(special_.size() == bytes_.size(), "one special flag per token");
  for (int32_t id = 0; id < size(); ++id)
    if (!bytes_[id].empty()) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b; });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i)
    lcp_[i] = static_cast<int32_t>(common_prefix(bytes_[sorted_[i - 1]], bytes_[sorted_[i]]));
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                             std::vector<int32_t> stop_ids) {
  const auto n = static_cast<int32_t>(tokenizer.vocab_size());
  std::vector<std::string> bytes(n);
  std::vector<char> special(n, 0);
  for (int32_t id : tokenizer.added_token_ids()) special[id] = 1;
  for (int32_t id = 0; id < n; ++id)
    if (tokenizer.is_known(id)) bytes[id] = std::string(tokenizer.token_bytes(id));
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(special), std::move(stop_ids));
}

size_t Vocabulary::end_of_prefix(size_t i, size_t len) const {
  // Sorted order keeps every token with a given prefix contiguous.
  const std::string_view prefix = std::string_view(bytes_[sorted_[i]]).substr(0, len);
  return static_cast<size_t>(
      std::partition_point(
          sorted_.begin() + static_cast<ptrdiff_t>(i) + 1, sorted_.end(),
          [&](int32_t id) { return std::string_view(bytes_[id]).substr(0, len) == prefix; }) -
      sorted_.begin());
}

struct TokenGrammar::PositionMask {
  std::vector<uint32_t> bits;  // accepted tokens (whatever room they need), when many
  std::vector<int32_t> ids;    // accepted tokens, when few
  // Accepted tokens that need room in the bounded repetition around the position: (need, id), need
  // descending. repeat_max: that repetition's bound (-1: none).
  std::vector<std::pair<int32_t, int32_t>> needs;
  int32_t max_need = 0;
  int32_t repeat_max = -1;
  std::vector<int32_t> uncertain;  // sorted-vocabulary indices, ascending
};

TokenGrammar::TokenGrammar() = default;
TokenGrammar::~TokenGrammar() = default;

bool TokenGrammar::is_candidate(int32_t id) const {
  return !vocab_->bytes(id).empty() && (!vocab_->is_special(id) || allowed_special_[id]);
}

void TokenGrammar::precompute(Matcher& m, int32_t position, PositionMask* out) const {
  m.reset_to_position(position);
  if (m.context_repeat() >= 0) out->repeat_max = tables_->repeats[m.context_repeat()].max;
  const std::vector<int32_t>& sorted = vocab_->sorted();
  std::string cur;           // the bytes the matcher holds
  std::vector<char> unc{0};  // unc[d]: a byte read before depth d may have left the rule (see the header)
  std::vector<int32_t> accepted;
  for (size_t i = 0; i < sorted.size();) {
    const int32_t id = sorted[i];
    if (!is_candidate(id)) {
      ++i;
      continue;
    }
    const std::string_view t = vocab_->bytes(id);
    const size_t common = common_prefix(cur, t);
    m.rollback(cur.size() - common);
    cur.resize(common);
    unc.resize(common + 1);
    bool failed = false;
    while (cur.size() < t.size()) {
      const size_t d = cur.size();
      const auto b = static_cast<uint8_t>(t[d]);
      const bool u = unc[d] || m.exit_follow(d).has(b);
      if (!m.accept_byte(b)) {  // every token that starts with t[0, d] shares this outcome
        const size_t end = vocab_->end_of_prefix(i, d + 1);
        if (u)
          for (size_t j = i; j < end; ++j)
            if (is_candidate(sorted[j])) out->uncertain.push_back(static_cast<int32_t>(j));
        i = end;
        failed = true;
        break;
      }
      cur.push_back(static_cast<char>(b));
      unc.push_back(u);
    }
    if (failed) continue;
    const int32_t need = out->repeat_max >= 0 ? m.min_need() : 0;
    if (unc[t.size()] && need > 0) {  // accepted only if the repetition has room: else the context decides
      out->uncertain.push_back(static_cast<int32_t>(i));
    } else {
      accepted.push_back(id);
      if (need > 0) out->needs.push_back({need, id});
    }
    ++i;
  }
  m.rollback(cur.size());
  std::sort(out->needs.begin(), out->needs.end(), std::greater<>());
  out->max_need = out->needs.empty() ? 0 : out->needs.front().first;
  if (accepted.size() * 32 > static_cast<size_t>(vocab_->size())) {
    out->bits.assign(vocab_->words(), 0);
    for (int32_t id : accepted) set_bit(out->bits.data(), id);
  } else {
    std::sort(accepted.begin(), accepted.end());
    out->ids = std::move(accepted);
  }
}

std::shared_ptr<const TokenGrammar> TokenGrammar::compile(const Grammar& grammar,
                                                          std::shared_ptr<const Vocabulary> vocab,
                                                          const std::vector<int32_t>& allowed_special,
                                                          int threads, double time_limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  grammar.validate();
  std::shared_ptr<TokenGrammar> tg(new TokenGrammar);
  tg->vocab_ = std::move(vocab);
  tg->tables_ = ParseTables::build(grammar);
  tg->allowed_special_.assign(tg->vocab_->size(), 0);
  for (int32_t id : allowed_special)
    if (id >= 0 && id < tg->vocab_->size()) tg->allowed_special_[id] = 1;
  const ParseTables& t = *tg->tables_;
  tg->position_slot_.assign(t.positions.size(), -1);
  std::vector<int32_t> scanning;
  for (int32_t p = 0; p < static_cast<int32_t>(t.positions.size()); ++p)
    if (t.positions[p].kind == ParseTables::kBytes) {
      tg->position_slot_[p] = static_cast<int32_t>(scanning.size());
      scanning.push_back(p);
    }
  tg->masks_.resize(scanning.size());
  if (threads <= 0)
    threads = static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(scanning.size())));
  if (scanning.size() > kMaxPositions)
    fail(ErrorKind::kInvalidArgument, "the grammar is too large: " + std::to_string(scanning.size()) +
                                          " byte positions (at most " + std::to_string(kMaxPositions) + ")");
  // Positions are independent: threads take every threads-th one. The first error (a grammar too ambiguous,
  // or over the time limit) stops them all and is rethrown here.
  std::mutex error_mu;
  std::exception_ptr error;
  std::atomic<bool> stop{false};
  auto work = [&](int w) {
    try {
      Matcher m(tg->tables_);
      for (size_t k = w; k < scanning.size() && !stop; k += threads) {
        tg->precompute(m, scanning[k], &tg->masks_[k]);
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > time_limit_s)
          fail(ErrorKind::kInvalidArgument, "the grammar took more than " +
                                                std::to_string(static_cast<int>(time_limit_s)) +
                                                " s to compile against the vocabulary: simplify it");
      }
    } catch (...) {
      std::lock_guard lock(error_mu);
      if (!error) error = std::current_exception();
      stop = true;
    }
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < threads; ++w) pool.emplace_back(work, w);
  work(0);
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  tg->stats_.positions = static_cast<int>(scanning.size());
  for (const PositionMask& pm : tg->masks_) {
    tg->stats_.uncertain += static_cast<int64_t>(pm.uncertain.size());
    tg->stats_.accepted += static_cast<int64_t>(pm.ids.size());
    for (uint32_t w : pm.bits) tg->stats_.accepted += std::popcount(w);
  }
  tg->stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return tg;
}

void TokenGrammar::fill_mask(Matcher& m, uint32_t* mask) const {
  const int32_t words = vocab_->words();
  std::fill(mask, mask + words, 0u);
  std::vector<int32_t> candidates;
  std::vector<uint32_t> scratch;
  for (const Matcher::Scan& s : m.scans()) {
    const PositionMask& pm = masks_[position_slot_[s.position]];
    const int64_t room = pm.repeat_max >= 0 && s.repeat_count >= 0 ? int64_t{pm.repeat_max} - s.repeat_count
                                                                   : std::numeric_limits<int64_t>::max();
    if (room >= pm.max_need) {
      if (!pm.bits.empty())
        for (int32_t w = 0; w < words; ++w) mask[w] |= pm.bits[w];
      for (int32_t id : pm.ids) set_bit(mask, id);
    } else {  // near the bound: leave out the tokens that need more room than is left
      scratch.assign(words, 0);
      if (!pm.bits.empty()) scratch = pm.bits;
      for (int32_t id : pm.ids) set_bit(scratch.data(), id);
      for (const auto& [need, id] : pm.needs) {
        if (need <= room) break;
        clear_bit(scratch.data(), id);
      }
      for (int32_t w = 0; w < words; ++w) mask[w] |= scratch[w];
    }
    candidates.insert(candidates.end(), pm.uncertain.begin(), pm.uncertain.end());
  }
  // The uncertain tokens, checked against the real parse in sorted order.
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::string cur;
  for (int32_t index : candidates) {
    const int32_t id = vocab_->sorted()[index];
    if (get_bit(mask, id)) continue;
    const std::string_view t = vocab_->bytes(id);
    const size_t common = common_prefix(cur, t);
    m.rollback(cur.size() - common);
    cur.resize(common);
    bool ok = true;
    while (cur.size() < t.size()) {
      if (!m.accept_byte(static_cast<uint8_t>(t[cur.size()]))) {
        ok = false;
        break;
      }
      cur.push_back(t[cur.size()]);
    }
    if (ok) set_bit(mask, id);
  }
  m.rollback(cur.size());
  if (m.can_finish())
    for (int32_t id : vocab_->stop_ids()) set_bit(mask, id);
}

namespace {

void fill_row(const MaskJob& job, int32_t words, uint32_t* row) {
  std::fill(row, row + words, 0u);
  try {
    job.grammar->fill_mask(*job.matcher, row);
  } catch (const Error&) {  // a state too ambiguous to follow: only the stop ids, ending the answer
    std::fill(row, row + words, 0u);
    for (int32_t id : job.grammar->vocab().stop_ids()) set_bit(row, id);
    return;
  }
  for (int32_t id : job.also_allowed) set_bit(row, id);
}

}  // namespace

MaskWorkers::MaskWorkers(int threads)
    : max_threads_(threads > 0
                       ? threads
                       : static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())))) {}

MaskWorkers::~MaskWorkers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void MaskWorkers::submit(std::vector<MaskJob> jobs, int32_t words, uint32_t* out) {
  {
    std::lock_guard lock(mu_);
    M3_CHECK(pending_ == 0, "MaskWorkers: a batch is still pending");
    if (threads_.empty())
      for (int w = 0; w < max_threads_; ++w) threads_.emplace_back(&MaskWorkers::run, this, w);
    jobs_ = std::move(jobs);
    words_ = words;
    out_ = out;
    participants_ = static_cast<int>(std::min<size_t>(jobs_.size() / 4 + 1, max_threads_));
    pending_ = participants_;
    error_ = nullptr;
    started_ = std::chrono::steady_clock::now();
    ++generation_;
  }
  work_cv_.notify_all();
}

double MaskWorkers::wait() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  if (error_) std::rethrow_exception(error_);
  return seconds_;
}

void MaskWorkers::run(int worker) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (worker >= participants_) continue;
    const int stride = participants_;
    lock.unlock();
    std::exception_ptr error;
    try {
      for (size_t r = worker; r < jobs_.size(); r += stride) fill_row(jobs_[r], words_, out_ + r * words_);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) {
      seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      done_cv_.notify_all();
    }
  }
}

bool TokenGrammar::allows(Matcher& m, int32_t id) const {
  if (std::find(vocab_->stop_ids().begin(), vocab_->stop_ids().end(), id) != vocab_->stop_ids().end())
    return m.can_finish();
  if (!is_candidate(id)) return false;
  const std::string_view t = vocab_->bytes(id);
  if (!m.accept(t)) return false;
  m.rollback(t.size());
  return true;
}

}  // namespace m3::grammar
