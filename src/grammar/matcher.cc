// The Earley recognizer: tables (positions, nullable rules, callers, FOLLOW sets), set closure, scanning,
// rollback, and the context parses token masks precompute with.
#include "grammar/matcher.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace m3::grammar {

std::shared_ptr<const ParseTables> ParseTables::build(const Grammar& g) {
  auto t = std::make_shared<ParseTables>();
  const auto num_rules = static_cast<int32_t>(g.rules().size());
  t->root = g.root();
  t->byte_sets = g.byte_sets();
  t->starts.resize(num_rules);
  t->repeats.resize(num_rules);
  t->nullable.assign(num_rules, 0);
  t->callers.resize(num_rules);
  t->follow.resize(num_rules);
  for (int32_t r = 0; r < num_rules; ++r) {
    const Rule& rule = g.rule(r);
    if (rule.is_repeat()) {
      t->repeats[r] = rule.repeat;
      t->starts[r].push_back(static_cast<int32_t>(t->positions.size()));
      t->positions.push_back({kRepeat, r, rule.repeat.item});
      continue;
    }
    for (const Sequence& alt : rule.alternatives) {
      t->starts[r].push_back(static_cast<int32_t>(t->positions.size()));
      for (const Symbol& s : alt)
        t->positions.push_back({s.kind == Symbol::kBytes ? kBytes : kRule, r, s.index});
      t->positions.push_back({kEnd, r, 0});
    }
  }
  // Nullable rules (fixed point).
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < num_rules; ++r) {
      if (t->nullable[r]) continue;
      bool n = false;
      if (t->repeats[r].item >= 0) {
        n = t->repeats[r].min == 0;
      } else {
        for (int32_t p : t->starts[r]) {
          while (t->positions[p].kind == kRule && t->nullable[t->positions[p].index]) ++p;
          n = n || t->positions[p].kind == kEnd;
        }
      }
      if (n) {
        t->nullable[r] = 1;
        changed = true;
      }
    }
  }
  // Callers.
  for (int32_t p = 0; p < static_cast<int32_t>(t->positions.size()); ++p) {
    const Position& pos = t->positions[p];
    if (pos.kind != kRule && pos.kind != kRepeat) continue;
    const bool own_left_recursion =
        pos.kind == kRule && pos.index == pos.rule &&
        std::find(t->starts[pos.rule].begin(), t->starts[pos.rule].end(), p) != t->starts[pos.rule].end();
    if (!own_left_recursion) t->callers[pos.index].push_back(p);
  }
  // FIRST sets, then FOLLOW sets (fixed points over bytes).
  std::vector<ByteSet> first(num_rules);
  // FIRST of the symbols from position p to its alternative's end; *nullable_rest: all of them nullable.
  auto first_from = [&](int32_t p, bool* nullable_rest) {
    ByteSet out;
    for (;; ++p) {
      const Position& pos = t->positions[p];
      if (pos.kind == kEnd || pos.kind == kRepeat) {
        *nullable_rest = true;
        return out;
      }
      if (pos.kind == kBytes) {
        out.add(t->byte_sets[pos.index]);
        *nullable_rest = false;
        return out;
      }
      out.add(first[pos.index]);
      if (!t->nullable[pos.index]) {
        *nullable_rest = false;
        return out;
      }
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < num_rules; ++r) {
      ByteSet f = first[r];
      if (t->repeats[r].item >= 0) {
        f.add(first[t->repeats[r].item]);
      } else {
        bool unused = false;
        for (int32_t p : t->starts[r]) f.add(first_from(p, &unused));
      }
      if (!(f == first[r])) {
        first[r] = f;
        changed = true;
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r = 0; r < num_rules; ++r) {
      ByteSet f = t->follow[r];
      for (int32_t c : t->callers[r]) {
        const Position& pos = t->positions[c];
        if (pos.kind == kRepeat) {  // r is the item: another item, or whatever follows the repetition
          f.add(first[r]);
          f.add(t->follow[pos.rule]);
          continue;
        }
        bool nullable_rest = false;
        f.add(first_from(c + 1, &nullable_rest));
        if (nullable_rest) f.add(t->follow[pos.rule]);
      }
      // Left recursion: r ::= r x ... is followed by x.
      for (int32_t s : t->starts[r])
        if (t->positions[s].kind == kRule && t->positions[s].index == r) {
          bool nullable_rest = false;
          f.add(first_from(s + 1, &nullable_rest));
        }
      if (!(f == t->follow[r])) {
        t->follow[r] = f;
        changed = true;
      }
    }
  }
  return t;
}

Matcher::Matcher(std::shared_ptr<const ParseTables> tables) : t_(std::move(tables)) {
  sets_.push_back({});
  for (int32_t s : t_->starts[t_->root]) add({s, 0, 0, 0});
  close_last_set();
}

void Matcher::reset_to_position(int32_t position) {
  items_.clear();
  sets_.assign(1, {});
  context_ = true;
  context_repeat_ = -1;
  // The innermost bounded repetition the start lies in, through single callers.
  int32_t r = t_->positions.at(position).rule;
  for (size_t step = 0; step < t_->starts.size(); ++step) {
    const auto& callers = t_->callers[r];
    if (callers.size() != 1 || r == t_->root) break;
    const ParseTables::Position& c = t_->positions[callers[0]];
    if (c.kind == ParseTables::kRepeat && t_->repeats[c.rule].max >= 0) {
      context_repeat_ = c.rule;
      break;
    }
    r = c.rule;
  }
  add({position, kContext, 0, 0});
  close_last_set();
}

void Matcher::add(const Item& item) {
  // Dedup within the set being built through an open-addressing index of its items.
  const size_t begin = sets_.back().begin;
  const size_t n = items_.size() - begin;
  if (n >= kMaxItemsPerSet)  // a pathologically ambiguous grammar: refuse rather than crawl
    fail(ErrorKind::kInvalidArgument, "the grammar is too ambiguous: more than " +
                                          std::to_string(kMaxItemsPerSet) + " parse states at one byte");
  if (slots_.size() < 2 * (n + 1)) {
    size_t cap = 64;
    while (cap < 4 * (n + 1)) cap *= 2;
    slots_.assign(cap, -1);
    used_slots_.clear();
    for (size_t i = begin; i < items_.size(); ++i) {
      const Item& it = items_[i];
      size_t h = (uint64_t(uint32_t(it.pos)) * 0x9E3779B97F4A7C15ull ^
                  uint64_t(uint32_t(it.origin)) * 0xC2B2AE3D27D4EB4Full ^
                  uint64_t(uint32_t(it.count)) * 0x165667B19E3779F9ull ^ uint64_t(uint32_t(it.need))) &
                 (cap - 1);
      while (slots_[h] >= 0) h = (h + 1) & (cap - 1);
      slots_[h] = static_cast<int32_t>(i - begin);
      used_slots_.push_back(h);
    }
  }
  const size_t mask = slots_.size() - 1;
  size_t h = (uint64_t(uint32_t(item.pos)) * 0x9E3779B97F4A7C15ull ^
              uint64_t(uint32_t(item.origin)) * 0xC2B2AE3D27D4EB4Full ^
              uint64_t(uint32_t(item.count)) * 0x165667B19E3779F9ull ^ uint64_t(uint32_t(item.need))) &
             mask;
  for (; slots_[h] >= 0; h = (h + 1) & mask)
    if (items_[begin + slots_[h]] == item) return;
  slots_[h] = static_cast<int32_t>(n);
  used_slots_.push_back(h);
  items_.push_back(item);
}

// A rule completed with origin `done.origin` (a real set): every item of that set waiting for it advances.
void Matcher::complete(int32_t rule, const Item& done) {
  const size_t begin = sets_[done.origin].begin, end = sets_[done.origin + 1].begin;
  for (size_t i = begin; i < end; ++i) {
    const Item waiting = items_[i];  // copy: add() may grow items_
    const ParseTables::Position& pos = t_->positions[waiting.pos];
    if (pos.index != rule) continue;
    const int32_t need = std::max(waiting.need, done.need);
    if (pos.kind == ParseTables::kRule) {
      add({waiting.pos + 1, waiting.origin, 0, need});
    } else if (pos.kind == ParseTables::kRepeat) {
      const Repeat& r = t_->repeats[pos.rule];
      int32_t count = waiting.count + 1;
      if (r.max < 0) count = std::min(count, std::max(r.min, 1));  // unbounded: only "reached min" matters
      const bool counted = waiting.origin == kContext && pos.rule == context_repeat_;
      add({waiting.pos, waiting.origin, count, counted ? std::max(need, count) : need});
    }
  }
}

// A rule completed whose origin is the unknown context (context parses only).
void Matcher::complete_in_context(int32_t rule, const Item& done) {
  Set& set = sets_.back();
  for (int32_t s : t_->starts[rule])  // its own left recursion
    if (t_->positions[s].kind == ParseTables::kRule && t_->positions[s].index == rule)
      add({s + 1, kContext, 0, done.need});
  const auto& callers = t_->callers[rule];
  if (rule == t_->root && callers.empty()) {  // the grammar's end
    set.finished = true;
    return;
  }
  if (callers.size() != 1 || rule == t_->root) {
    set.exit_follow.add(t_->follow[rule]);
    return;
  }
  const int32_t c = callers[0];
  const ParseTables::Position& pos = t_->positions[c];
  if (pos.kind == ParseTables::kRule) {
    add({c + 1, kContext, 0, done.need});
    return;
  }
  // The item of a repetition: one more item beyond the unknown count.
  const bool counted = pos.rule == context_repeat_;
  add({c, kContext, 1, counted ? std::max(done.need, 1) : done.need});
}

void Matcher::close_last_set() {
  Set& set = sets_.back();
  const auto k = static_cast<int32_t>(sets_.size() - 1);
  for (size_t i = set.begin; i < items_.size(); ++i) {
    const Item item = items_[i];
    const ParseTables::Position& pos = t_->positions[item.pos];
    switch (pos.kind) {
      case ParseTables::kBytes:
        sets_.back().next.add(t_->byte_sets[pos.index]);
        break;
      case ParseTables::kRule:
        for (int32_t s : t_->starts[pos.index]) add({s, k, 0, item.need});
        if (t_->nullable[pos.index]) add({item.pos + 1, item.origin, 0, item.need});
        break;
      case ParseTables::kRepeat: {
        const Repeat& r = t_->repeats[pos.rule];
        const bool context = item.origin == kContext;
        const bool counted = context && pos.rule == context_repeat_;
        // Another item: within bounds (a context repetition's room is what `need` records).
        if (context || r.max < 0 || item.count < r.max)
          for (int32_t s : t_->starts[r.item])
            add({s, k, 0, counted ? std::max(item.need, item.count + 1) : item.need});
        if (context) {
          if (item.count >= r.min && item.count > 0)
            complete_in_context(pos.rule, item);
          else if (item.count > 0)  // the unknown count may or may not have reached min
            sets_.back().exit_follow.add(t_->follow[pos.rule]);
        } else if (item.count >= r.min && item.origin != k) {
          complete(pos.rule, item);
        }
        break;
      }
      case ParseTables::kEnd:
        if (item.origin == kContext)
          complete_in_context(pos.rule, item);
        else if (item.origin != k)  // an empty completion: prediction already advanced over it
          complete(pos.rule, item);
        break;
    }
  }
  // A sentence: the root completed from the start.
  Set& last = sets_.back();
  if (!context_) {
    for (size_t i = last.begin; i < items_.size(); ++i) {
      const Item& item = items_[i];
      if (item.origin != 0) continue;
      const ParseTables::Position& pos = t_->positions[item.pos];
      if (pos.rule != t_->root) continue;
      if (pos.kind == ParseTables::kEnd ||
          (pos.kind == ParseTables::kRepeat && item.count >= t_->repeats[pos.rule].min)) {
        last.finished = true;
        break;
      }
    }
  }
  for (size_t h : used_slots_) slots_[h] = -1;
  used_slots_.clear();
}

bool Matcher::accept_byte(uint8_t b) {
  if (!sets_.back().next.has(b)) return false;
  const size_t begin = sets_.back().begin, end = items_.size();
  Set next;
  next.begin = end;
  sets_.push_back(next);
  for (size_t i = begin; i < end; ++i) {
    const Item item = items_[i];
    const ParseTables::Position& pos = t_->positions[item.pos];
    if (pos.kind == ParseTables::kBytes && t_->byte_sets[pos.index].has(b))
      add({item.pos + 1, item.origin, 0, item.need});
  }
  close_last_set();
  return true;
}

bool Matcher::accept(std::string_view bytes) {
  size_t done = 0;
  for (; done < bytes.size(); ++done)
    if (!accept_byte(static_cast<uint8_t>(bytes[done]))) break;
  if (done == bytes.size()) return true;
  rollback(done);
  return false;
}

void Matcher::rollback(size_t n) {
  M3_CHECK(n <= num_bytes(), "rollback past the start");
  if (n == 0) return;
  const size_t end = sets_[sets_.size() - n].begin;
  sets_.resize(sets_.size() - n);
  items_.resize(end);
}

// The fewest items matched by the innermost bounded repetition around an item of `rule` that began at set
// `origin`, following the same single-caller chain reset_to_position does; -1 when there is none.
int32_t Matcher::repeat_base(int32_t rule, int32_t origin, size_t depth) const {
  const auto& callers = t_->callers[rule];
  if (callers.size() != 1 || rule == t_->root || depth > t_->starts.size()) return -1;
  const int32_t c = callers[0];
  const ParseTables::Position& pos = t_->positions[c];
  const bool bounded = pos.kind == ParseTables::kRepeat && t_->repeats[pos.rule].max >= 0;
  int32_t best = -1;
  for (size_t i = sets_[origin].begin,
              end = size_t(origin) + 1 < sets_.size() ? sets_[origin + 1].begin : items_.size();
       i < end; ++i) {
    const Item& item = items_[i];
    if (item.pos != c) continue;
    const int32_t base = bounded ? item.count : repeat_base(pos.rule, item.origin, depth + 1);
    if (base >= 0 && (best < 0 || base < best)) best = base;
  }
  if (best < 0 && bounded) best = t_->repeats[pos.rule].max;  // not found: leave no room (never expected)
  return best;
}

std::vector<Matcher::Scan> Matcher::scans() const {
  std::vector<Scan> out;
  for (size_t i = sets_.back().begin; i < items_.size(); ++i) {
    const Item& item = items_[i];
    const ParseTables::Position& pos = t_->positions[item.pos];
    if (pos.kind != ParseTables::kBytes) continue;
    out.push_back({item.pos, item.origin == kContext ? -1 : repeat_base(pos.rule, item.origin, 0)});
  }
  std::sort(out.begin(), out.end(), [](const Scan& a, const Scan& b) {
    return a.position != b.position ? a.position < b.position : a.repeat_count < b.repeat_count;
  });
  // One per position, with its fewest matched items (-1 sorts first but only occurs alone per position).
  std::vector<Scan> distinct;
  for (const Scan& s : out)
    if (distinct.empty() || distinct.back().position != s.position) distinct.push_back(s);
  return distinct;
}

int32_t Matcher::min_need() const {
  int32_t best = std::numeric_limits<int32_t>::max();
  for (size_t i = sets_.back().begin; i < items_.size(); ++i) best = std::min(best, items_[i].need);
  return best == std::numeric_limits<int32_t>::max() ? 0 : best;
}

bool matches(const Grammar& g, std::string_view text) {
  Matcher m(g);
  return m.accept(text) && m.can_finish();
}

}  // namespace m3::grammar
