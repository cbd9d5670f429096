// UTF-8 validation, iteration and the resumable lossy decoder. The well-formedness rules are those of the
// Unicode Standard, Table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF).
#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// Length of the sequence a lead byte starts, or 0 if the byte cannot start one.
int sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow `lead` as the second byte; the narrower ranges exclude overlongs, surrogates and
// code points above U+10FFFF.
bool valid_second(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

bool is_continuation(uint8_t b) {
  return b >= 0x80 && b <= 0xBF;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    int len = sequence_length(p[i]);
    if (len == 0 || i + len > n || !valid_second(p[i], p[i + 1])) return i;
    for (int k = 2; k < len; ++k) {
      if (!is_continuation(p[i + k])) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = sequence_length(b0);
  char32_t cp = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_unicode_whitespace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void Utf8LossyDecoder::feed(std::string_view bytes, std::string& out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    if (pending_len_ == 0) {
      // Bulk-copy ASCII runs, the common case for most model output.
      size_t j = i;
      while (j < n && p[j] < 0x80) ++j;
      if (j > i) {
        out.append(bytes.data() + i, j - i);
        i = j;
        continue;
      }
      int len = sequence_length(p[i]);
      if (len == 0) {
        out += kReplacement;
      } else {
        pending_[0] = p[i];
        pending_len_ = 1;
        needed_ = len;
      }
      ++i;
      continue;
    }
    const uint8_t b = p[i];
    const bool ok = pending_len_ == 1 ? valid_second(pending_[0], b) : is_continuation(b);
    if (!ok) {
      // The maximal valid prefix collapses to one replacement; `b` is then examined afresh.
      out += kReplacement;
      pending_len_ = 0;
      continue;
    }
    pending_[pending_len_++] = b;
    ++i;
    if (pending_len_ == needed_) {
      out.append(reinterpret_cast<const char*>(pending_), pending_len_);
      pending_len_ = 0;
    }
  }
}

void Utf8LossyDecoder::finish(std::string& out) {
  if (pending_len_ > 0) out += kReplacement;
  pending_len_ = 0;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8LossyDecoder d;
  d.feed(bytes, out);
  d.finish(out);
  return out;
}

}  // namespace m3::tok
