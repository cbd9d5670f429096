// A byte-level Earley recognizer for grammar/grammar.h grammars: feed bytes one at a time, ask whether the
// input so far is a complete sentence, and roll back (token masks try a token's bytes and undo them).
// Items are (position, origin, count) with position = (rule, alternative, dot) flattened into one id and
// count the items a repetition has matched; nullable rules are handled by advancing over them at prediction
// (Aycock & Horspool). A repetition keeps one item per byte however long its run; nesting depth adds items.
//
// Context parses (for grammar/token_mask.cc): a parse may also start from one position inside a rule at an
// unknown place of an unknown input. Completing a rule whose origin is that unknown context goes on where the
// grammar says it must: in the rule's own left recursion, in a repetition of it (counting the items matched
// beyond the unknown count), or at the rule's one caller when it has exactly one; otherwise it "exits the
// context": what follows depends on the input before, so a token that reads on past an exit is decided at
// run time.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace m3::grammar {

// The grammar flattened for parsing; shared by every matcher of one grammar.
struct ParseTables {
  // kBytes / kRule: what follows the dot; kEnd: the alternative's end; kRepeat: a repetition rule's one
  // position (index = the item rule).
  enum Kind : uint8_t { kBytes, kRule, kEnd, kRepeat };
  struct Position {
    Kind kind = kEnd;
    int32_t rule = 0;   // the rule the position belongs to
    int32_t index = 0;  // byte-set index (kBytes), rule id (kRule), item rule (kRepeat)
  };
  std::vector<Position> positions;           // p + 1 is the next position of the same alternative
  std::vector<std::vector<int32_t>> starts;  // [rule] -> first position of each alternative (a repetition: 1)
  std::vector<Repeat> repeats;               // [rule] -> its bounds (item < 0: not a repetition)
  std::vector<char> nullable;                // [rule] derives the empty string
  std::vector<ByteSet> byte_sets;            // copied from the grammar
  // [rule] -> kRule / kRepeat positions that call it, leaving out its own leading left recursion.
  std::vector<std::vector<int32_t>> callers;
  // [rule] -> the bytes that can follow a completion of it somewhere in the grammar (its FOLLOW set).
  std::vector<ByteSet> follow;
  int32_t root = 0;

  static std::shared_ptr<const ParseTables> build(const Grammar& g);  // g must validate()
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const ParseTables> tables);
  explicit Matcher(const Grammar& g) : Matcher(ParseTables::build(g)) {}

  // Consumes one byte; false (state unchanged) when no continuation of the input so far has it there. Throws
  // m3::Error(kInvalidArgument) when one byte would need more than 20,000 parse states (a grammar too
  // ambiguous to follow).
  bool accept_byte(uint8_t b);
  // All or nothing: false leaves the state unchanged.
  bool accept(std::string_view bytes);
  // Drops the last n consumed bytes (n <= num_bytes()).
  void rollback(size_t n);
  size_t num_bytes() const { return sets_.size() - 1; }

  // The input so far is a sentence of the grammar (for a context parse: reached the grammar's end).
  bool can_finish() const { return sets_.back().finished; }
  // The bytes that may come next (empty once nothing can follow).
  const ByteSet& next_bytes() const { return sets_.back().next; }

  // One scanning item of the current set and, when its position lies (through single callers) inside a
  // bounded repetition, the fewest items that repetition has matched on any path to it (else -1).
  struct Scan {
    int32_t position;
    int32_t repeat_count;
  };
  // The current set's scanning positions, distinct, ascending by position: what token masks start from.
  std::vector<Scan> scans() const;

  const ParseTables& tables() const { return *t_; }

  // --- context parses (grammar/token_mask.cc) ---
  // Starts over from the single item (position, unknown context).
  void reset_to_position(int32_t position);
  // The FOLLOW bytes of the rules whose completion exited the context at set i (empty: no exit there). A byte
  // read there that lies in it may be accepted or not depending on the context.
  const ByteSet& exit_follow(size_t i) const { return sets_[i].exit_follow; }
  // Over the current set's items: the fewest items beyond the unknown count that the innermost bounded
  // repetition around the start needs room for (0 when none is involved).
  int32_t min_need() const;
  // The bounded repetition rule whose room min_need() counts (-1: none).
  int32_t context_repeat() const { return context_repeat_; }

 private:
  struct Item {
    int32_t pos;
    int32_t origin;  // set index, or kContext
    int32_t count;   // kRepeat: items matched (context repetitions: items beyond the unknown count)
    int32_t need;    // context parses: room the innermost bounded repetition needs (see min_need)
    bool operator==(const Item& o) const {
      return pos == o.pos && origin == o.origin && count == o.count && need == o.need;
    }
  };
  struct Set {
    size_t begin = 0;  // items_[begin, next set's begin)
    ByteSet next;
    bool finished = false;
    ByteSet exit_follow;
  };
  static constexpr int32_t kContext = -1;
  static constexpr size_t kMaxItemsPerSet = 20000;
  void close_last_set();
  void add(const Item& item);
  void complete(int32_t rule, const Item& done);
  void complete_in_context(int32_t rule, const Item& done);
  int32_t repeat_base(int32_t rule, int32_t origin, size_t depth) const;

  std::shared_ptr<const ParseTables> t_;
  std::vector<Item> items_;
  std::vector<Set> sets_;
  // Open-addressing index of the last set's items while it is built (dedup).
  std::vector<int32_t> slots_;
  std::vector<size_t> used_slots_;
  bool context_ = false;         // a context parse (reset_to_position)
  int32_t context_repeat_ = -1;  // context parses: the bounded repetition rule whose room `need` counts
};

// Whether `text` is a sentence of `g`.
bool matches(const Grammar& g, std::string_view text);

}  // namespace m3::grammar
