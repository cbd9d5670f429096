// Tag recognition for MarkupLexer. A tag is decided from the bytes after its namespace marker alone (never
// from what came before), which is what makes the lexer's output independent of chunking.
#include "chat/parsers/markup_lexer.h"

#include <algorithm>

namespace m3 {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

size_t MarkupLexer::partial_marker_suffix(size_t pos) const {
  size_t avail = buf_.size() - pos;
  std::string_view b(buf_);
  for (size_t k = std::min(avail, kMinimaxNamespace.size() - 1); k > 0; --k) {
    if (b.substr(b.size() - k) == kMinimaxNamespace.substr(0, k)) return k;
  }
  return 0;
}

MarkupLexer::Scan MarkupLexer::scan_tag(size_t ns, MarkupEvent& tag, size_t& end) const {
  size_t lt = ns + kMinimaxNamespace.size();
  if (lt >= buf_.size()) return Scan::kNeedMore;
  if (buf_[lt] != '<') return Scan::kNotTag;
  size_t limit = std::min(buf_.size(), lt + 1 + kMaxTagLength + 1);
  size_t gt = lt + 1;
  for (; gt < limit; ++gt) {
    char c = buf_[gt];
    if (c == '>') break;
    // Tags never span lines or contain '<'; seeing one means this marker starts no tag, and it also stops a
    // marker followed by ordinary text from holding the stream back.
    if (c == '<' || c == '\n' || c == '\r') return Scan::kNotTag;
  }
  if (gt == limit) {
    return gt - (lt + 1) > kMaxTagLength ? Scan::kNotTag : Scan::kNeedMore;
  }
  std::string_view inner = std::string_view(buf_).substr(lt + 1, gt - lt - 1);
  if (inner.size() > kMaxTagLength) return Scan::kNotTag;
  tag.raw = std::string_view(buf_).substr(ns, gt + 1 - ns);
  if (!inner.empty() && inner.front() == '/') {
    tag.kind = MarkupEvent::Kind::kClose;
    tag.name = trim(inner.substr(1));
  } else {
    tag.kind = MarkupEvent::Kind::kOpen;
    tag.name = trim(inner);
    // `<invoke name="f">` carries an attribute; every other tag is named by its whole text (the template
    // writes
    // `<` + key + `>`, and keys may contain spaces).
    constexpr std::string_view kInvoke = "invoke";
    if (tag.name.size() > kInvoke.size() && tag.name.substr(0, kInvoke.size()) == kInvoke &&
        is_space(tag.name[kInvoke.size()])) {
      tag.attrs = trim(tag.name.substr(kInvoke.size()));
      tag.name = kInvoke;
    }
  }
  if (tag.name.empty()) return Scan::kNotTag;
  end = gt + 1;
  return Scan::kTag;
}

}  // namespace m3
