// Incremental lexer for MiniMax-M3 tool-call markup: every structural tag is `]<]minimax[>[` + `<name …>` or
// `</name>` (serving-api.md §4.1); everything else is text. Invariants: the event sequence depends only on
// the bytes fed, never on how they were split into chunks (text may arrive in more or fewer pieces); at most
// one partial namespace marker or one incomplete tag (bounded by kMaxTagLength) is held back between calls.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace m3 {

inline constexpr std::string_view kMinimaxNamespace = "]<]minimax[>[";

struct MarkupEvent {
  // kCutTag: at the end of the stream, a namespace marker followed by an unfinished tag ("…[>[</too"): the
  // output was cut off inside structure. A lone partial marker at the end is ordinary kText.
  enum class Kind { kText, kOpen, kClose, kCutTag };
  Kind kind = Kind::kText;
  std::string_view raw;    // the exact bytes of this event
  std::string_view name;   // tag name, whitespace-trimmed; "invoke" for an invoke tag
  std::string_view attrs;  // open tags only: what follows the name (the invoke's `name="…"`)
};

class MarkupLexer {
 public:
  // A tag longer than this (between `<` and `>`) is not a tag: the marker is then plain text. Keeps the
  // held-back buffer, and so the cost of each push, bounded.
  static constexpr size_t kMaxTagLength = 256;

  // Appends `chunk` and calls `sink(const MarkupEvent&)` for every event that is now certain. With `eof`,
  // held bytes resolve to text or a kCutTag. Views in the event are valid only during the call.
  template <class Sink>
  void feed(std::string_view chunk, bool eof, Sink&& sink) {
    buf_.append(chunk);
    size_t pos = 0;
    while (pos < buf_.size()) {
      size_t ns = buf_.find(kMinimaxNamespace, pos);
      if (ns == std::string::npos) {
        size_t keep = eof ? 0 : partial_marker_suffix(pos);
        if (buf_.size() - keep > pos) sink(text(pos, buf_.size() - keep));
        pos = buf_.size() - keep;
        break;
      }
      if (ns > pos) sink(text(pos, ns));
      pos = ns;
      MarkupEvent tag;
      size_t end = 0;
      Scan r = scan_tag(ns, tag, end);
      if (r == Scan::kNeedMore) {
        if (!eof) break;
        MarkupEvent cut = text(ns, buf_.size());
        cut.kind = MarkupEvent::Kind::kCutTag;
        sink(cut);
        pos = buf_.size();
        break;
      }
      if (r == Scan::kNotTag) {
        sink(text(ns, ns + kMinimaxNamespace.size()));
        pos = ns + kMinimaxNamespace.size();
        continue;
      }
      sink(tag);
      pos = end;
    }
    buf_.erase(0, pos);
  }

 private:
  enum class Scan { kTag, kNotTag, kNeedMore };

  MarkupEvent text(size_t from, size_t to) const {
    MarkupEvent e;
    e.raw = std::string_view(buf_).substr(from, to - from);
    return e;
  }
  size_t partial_marker_suffix(size_t pos) const;
  Scan scan_tag(size_t ns, MarkupEvent& tag, size_t& end) const;

  std::string buf_;
};

}  // namespace m3
