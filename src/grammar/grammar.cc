// Grammar construction, validation and the GBNF-style dump.
#include "grammar/grammar.h"

#include <bit>

#include "common/error.h"

namespace m3::grammar {

int ByteSet::count() const {
  int n = 0;
  for (uint64_t w : bits_) n += std::popcount(w);
  return n;
}

int32_t Grammar::add_rule(std::string_view name) {
  std::string unique(name.empty() ? "rule" : name);
  for (int suffix = 1; by_name_.count(unique); ++suffix)
    unique = std::string(name) + "_" + std::to_string(suffix);
  const auto id = static_cast<int32_t>(rules_.size());
  rules_.push_back({unique, {}, {}});
  by_name_.emplace(unique, id);
  return id;
}

void Grammar::add_alternative(int32_t rule, Sequence alternative) {
  rules_.at(rule).alternatives.push_back(std::move(alternative));
}

int32_t Grammar::find_rule(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

Symbol Grammar::bytes(const ByteSet& set) {
  auto [it, inserted] = byte_set_index_.emplace(set, static_cast<int32_t>(byte_sets_.size()));
  if (inserted) byte_sets_.push_back(set);
  return {Symbol::kBytes, it->second};
}

Sequence Grammar::literal(std::string_view text) {
  Sequence seq;
  for (char c : text) seq.push_back(bytes(ByteSet::of(static_cast<uint8_t>(c))));
  return seq;
}

namespace {

// The UTF-8 encoding length of code point c.
int utf8_length(uint32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}
uint32_t utf8_max_of_length(int n) {
  return n == 1 ? 0x7F : n == 2 ? 0x7FF : n == 3 ? 0xFFFF : 0x10FFFF;
}
std::vector<uint8_t> utf8_bytes(uint32_t c) {
  const int n = utf8_length(c);
  if (n == 1) return {static_cast<uint8_t>(c)};
  std::vector<uint8_t> b(n);
  for (int i = n - 1; i > 0; --i, c >>= 6) b[i] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  b[0] = static_cast<uint8_t>((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | c);
  return b;
}

}  // namespace

// Code points [lo, hi] of one encoded length as byte-range sequences: split until the range is a full
// block in its trailing bytes, the classic UTF-8 range compiler.
void Grammar::utf8_range(uint32_t lo, uint32_t hi, std::vector<Sequence>* out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // no surrogates
    if (lo < 0xD800) utf8_range(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_range(0xE000, hi, out);
    return;
  }
  const int nlo = utf8_length(lo), nhi = utf8_length(hi);
  if (nlo != nhi) {
    const uint32_t split = utf8_max_of_length(nlo);
    utf8_range(lo, split, out);
    utf8_range(split + 1, hi, out);
    return;
  }
  const int n = nlo;
  // Split so that for some k the first k bytes differ only in the last of them and the rest are full
  // continuation ranges.
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;  // the low 6*i bits: i trailing bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_range(lo, lo | m, out);
        utf8_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_range(lo, (hi & ~m) - 1, out);
        utf8_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::vector<uint8_t> a = utf8_bytes(lo), b = utf8_bytes(hi);
  Sequence seq;
  for (int i = 0; i < n; ++i) seq.push_back(bytes(ByteSet::range(a[i], b[i])));
  out->push_back(std::move(seq));
}

Symbol Grammar::intern(std::string_view name, std::vector<Sequence> alternatives) {
  if (const auto it = interned_.find(alternatives); it != interned_.end()) return ref(it->second);
  const int32_t id = add_rule(name);
  rules_[id].alternatives = alternatives;
  interned_.emplace(std::move(alternatives), id);
  return ref(id);
}

Symbol Grammar::optional(std::string_view name, Sequence item) {
  return intern(name, {std::move(item), {}});
}

Symbol Grammar::repeat(std::string_view name, Sequence item, int min, int max) {
  M3_CHECK(min >= 0 && (max < 0 || max >= min), "repeat bounds");
  if (max == 0) return intern(name, {{}});
  if (max < 0) max = -1;
  // The item becomes a rule of this repetition alone (a lone reference to a defined rule is copied,
  // alternatives and all), so the repetition is its only caller: token masks then see across item boundaries
  // instead of stopping at every one (token_mask.h). Equal repetitions share one rule.
  std::vector<Sequence> alternatives{item};
  if (item.size() == 1 && item[0].kind == Symbol::kRule) {
    const Rule& r = rules_[item[0].index];
    if (!r.is_repeat() && !r.alternatives.empty()) alternatives = r.alternatives;
  }
  auto key = std::make_tuple(alternatives, min, max);
  if (const auto it = repeats_.find(key); it != repeats_.end()) return ref(it->second);
  const int32_t item_rule = add_rule(std::string(name) + "_item");
  rules_[item_rule].alternatives = alternatives;
  const int32_t id = add_rule(name);
  rules_[id].repeat = {item_rule, min, max};
  repeats_.emplace(std::move(key), id);
  return ref(id);
}

void Grammar::validate() const {
  if (root_ < 0 || root_ >= static_cast<int32_t>(rules_.size()))
    fail(ErrorKind::kInvalidArgument, "the grammar has no root rule");
  for (const Rule& r : rules_) {
    if (r.is_repeat()) {
      if (r.repeat.item >= static_cast<int32_t>(rules_.size()))
        fail(ErrorKind::kInvalidArgument, "grammar rule '" + r.name + "' repeats an undefined rule");
      continue;
    }
    if (r.alternatives.empty()) fail(ErrorKind::kInvalidArgument, "grammar rule '" + r.name + "' is empty");
    for (const Sequence& seq : r.alternatives)
      for (const Symbol& s : seq) {
        const size_t limit = s.kind == Symbol::kBytes ? byte_sets_.size() : rules_.size();
        if (s.index < 0 || static_cast<size_t>(s.index) >= limit)
          fail(ErrorKind::kInvalidArgument, "grammar rule '" + r.name + "' refers to an undefined symbol");
      }
  }
  // Productive rules: those that derive some finite string (fixed point).
  std::vector<char> productive(rules_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (productive[i]) continue;
      if (rules_[i].is_repeat()) {
        if (rules_[i].repeat.min == 0 || productive[rules_[i].repeat.item]) {
          productive[i] = 1;
          changed = true;
        }
        continue;
      }
      for (const Sequence& seq : rules_[i].alternatives) {
        bool ok = true;
        for (const Symbol& s : seq)
          if ((s.kind == Symbol::kRule && !productive[s.index]) ||
              (s.kind == Symbol::kBytes && byte_sets_[s.index].empty()))
            ok = false;
        if (ok) {
          productive[i] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Nullable rules, to refuse repetitions of an item that can match nothing.
  std::vector<char> nullable(rules_.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (nullable[i]) continue;
      const Rule& r = rules_[i];
      bool n = false;
      if (r.is_repeat()) {
        n = r.repeat.min == 0 || nullable[r.repeat.item];
      } else {
        for (const Sequence& seq : r.alternatives) {
          bool all = true;
          for (const Symbol& s : seq)
            if (s.kind == Symbol::kBytes || !nullable[s.index]) all = false;
          n = n || all;
        }
      }
      if (n) {
        nullable[i] = 1;
        changed = true;
      }
    }
  }
  for (const Rule& r : rules_)
    if (r.is_repeat() && nullable[r.repeat.item])
      fail(ErrorKind::kInvalidArgument, "grammar rule '" + r.name + "' repeats '" +
                                            rules_[r.repeat.item].name + "', which can match nothing");
  std::string unproductive;
  for (size_t i = 0; i < rules_.size(); ++i)
    if (!productive[i]) unproductive += (unproductive.empty() ? "'" : ", '") + rules_[i].name + "'";
  if (!unproductive.empty())
    fail(ErrorKind::kInvalidArgument, "grammar rules never deriving a finite string: " + unproductive);
}

namespace {

void append_byte(std::string& out, int b, bool in_class) {
  const bool special = in_class ? (b == ']' || b == '\\' || b == '^' || b == '-') : (b == '"' || b == '\\');
  if (b >= 0x20 && b < 0x7F && !special) {
    out += static_cast<char>(b);
  } else {
    static const char* hex = "0123456789ABCDEF";
    out += "\\x";
    out += hex[b >> 4];
    out += hex[b & 15];
  }
}

void append_byte_set(std::string& out, const ByteSet& s) {
  if (s.count() == 1) {
    for (int b = 0; b < 256; ++b)
      if (s.has(static_cast<uint8_t>(b))) {
        out += '"';
        append_byte(out, b, false);
        out += '"';
      }
    return;
  }
  out += '[';
  for (int b = 0; b < 256;) {
    if (!s.has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    append_byte(out, b, true);
    if (e > b) {
      out += '-';
      append_byte(out, e, true);
    }
    b = e + 1;
  }
  out += ']';
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  auto dump = [&](int32_t id) {
    const Rule& r = rules_[id];
    out += r.name + " ::=";
    if (r.is_repeat()) {
      out += ' ' + rules_[r.repeat.item].name + '{' + std::to_string(r.repeat.min) + ',' +
             (r.repeat.max < 0 ? std::string() : std::to_string(r.repeat.max)) + "}\n";
      return;
    }
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a) out += " |";
      if (r.alternatives[a].empty()) out += " \"\"";
      for (const Symbol& s : r.alternatives[a]) {
        out += ' ';
        if (s.kind == Symbol::kRule)
          out += rules_[s.index].name;
        else
          append_byte_set(out, byte_sets_[s.index]);
      }
    }
    out += '\n';
  };
  if (root_ >= 0 && root_ < static_cast<int32_t>(rules_.size())) dump(root_);
  for (int32_t i = 0; i < static_cast<int32_t>(rules_.size()); ++i)
    if (i != root_) dump(i);
  return out;
}

}  // namespace m3::grammar
