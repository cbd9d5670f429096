// Unicode normalization through utf8proc. ASCII is invariant under every form, and an NFC quick check (every
// code point a non-decomposing starter that cannot compose with its predecessor) lets most text skip
// utf8proc entirely.
#include "tokenizer/normalizer.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/unicode_compat.h"
#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

// True when every byte of `s` is below `limit_lead`, i.e. every code point is below the one that lead byte
// starts.
bool all_below(std::string_view s, unsigned char limit_lead) {
  for (unsigned char c : s) {
    if (c >= limit_lead) return false;
  }
  return true;
}

const std::vector<char32_t>& composition_seconds();

}  // namespace

void Normalizer::add_steps(const nlohmann::json& section, const std::string& path, std::vector<Form>& steps) {
  if (section.is_null()) return;
  if (!section.is_object() || !section.contains("type") || !section["type"].is_string()) {
    fail(ErrorKind::kCorruptData,
         "tokenizer: " + path + ": normalizer must be an object with a string \"type\"");
  }
  const std::string& type = section["type"].get_ref<const std::string&>();
  if (type == "NFC") {
    steps.push_back(Form::kNFC);
  } else if (type == "NFD") {
    steps.push_back(Form::kNFD);
  } else if (type == "NFKC") {
    steps.push_back(Form::kNFKC);
  } else if (type == "NFKD") {
    steps.push_back(Form::kNFKD);
  } else if (type == "Sequence") {
    auto it = section.find("normalizers");
    if (it == section.end() || !it->is_array()) {
      fail(ErrorKind::kCorruptData,
           "tokenizer: " + path + ": normalizer Sequence lacks a \"normalizers\" array");
    }
    for (const auto& child : *it) add_steps(child, path, steps);
  } else {
    fail(ErrorKind::kUnsupported, "tokenizer: " + path + ": normalizer.type \"" + type +
                                      "\" is not supported (NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

Normalizer Normalizer::from_json(const nlohmann::json& section, const std::string& path) {
  Normalizer n;
  add_steps(section, path, n.steps_);
  composition_seconds();  // build the quick-check table at load time rather than on the first encode
  return n;
}

namespace {

// Code points that may combine with a preceding character under canonical composition: the last element of
// every canonical decomposition, plus the Hangul vowel and trailing jamo that compose algorithmically.
// Computed once from utf8proc's tables (a few milliseconds).
const std::vector<char32_t>& composition_seconds() {
  static const std::vector<char32_t> seconds = [] {
    std::vector<char32_t> v;
    for (char32_t cp = 0x300; cp < 0x110000; ++cp) {
      if (cp == 0xD800) cp = 0xE000;
      const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
      if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) continue;  // no canonical mapping
      utf8proc_int32_t buf[8];
      int boundclass = 0;
      utf8proc_ssize_t n =
          utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buf, 8, UTF8PROC_DECOMPOSE, &boundclass);
      if (n >= 2 && n <= 8) v.push_back(static_cast<char32_t>(buf[n - 1]));
    }
    for (char32_t cp = 0x1161; cp <= 0x1175; ++cp) v.push_back(cp);
    for (char32_t cp = 0x11A8; cp <= 0x11C2; ++cp) v.push_back(cp);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return seconds;
}

// NFC quick check: true when no code point of `s` can change under NFC (each is a starter without a
// canonical decomposition that cannot compose with what precedes it), which is the case for most text.
bool surely_nfc(std::string_view s) {
  const auto& seconds = composition_seconds();
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0xCC) {  // below U+0300
      i += static_cast<unsigned char>(s[i]) < 0x80 ? 1 : 2;
      continue;
    }
    const char32_t cp = next_code_point(s, i);
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (p->combining_class != 0) return false;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;
    if (std::binary_search(seconds.begin(), seconds.end(), cp)) return false;
  }
  return true;
}

}  // namespace

// One form: decomposition is per code point, canonical reordering only moves runs of non-starters, and
// composition joins a starter only with later characters that are composition seconds and not blocked by
// another starter. An inert starter at b's start is therefore not reordered, not composed into a's last
// starter, and blocks b's characters from composing with a's; the inert starter after it keeps it from
// composing with anything of b; a's last code point, inert too, has nothing in a after it. The split of
// apply() at post-9.0 characters only adds cuts that a and b make alike, and surely_nfc() is a per-code-point
// test that is exact whenever it answers true, so skipping utf8proc for a or b alone changes nothing.
bool Normalizer::is_inert_starter(char32_t cp) const {
  if (steps_.empty()) return true;
  if (steps_.size() > 1) return false;
  if (cp >= 0xAC00 && cp <= 0xD7A3) return false;  // Hangul syllables decompose algorithmically
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  if (p->combining_class != 0 || p->decomp_seqindex != UINT16_MAX) return false;
  const auto& seconds = composition_seconds();
  return !std::binary_search(seconds.begin(), seconds.end(), cp);
}

void Normalizer::normalize(std::string_view in, std::string& out) const {
  out.assign(in);
  std::string tmp;
  for (Form form : steps_) {
    if (form == Form::kNFC ? surely_nfc(out) : all_below(out, 0x80)) continue;
    apply(form, out, tmp);
    out.swap(tmp);
  }
}

void Normalizer::apply(Form form, std::string_view in, std::string& out) {
  out.clear();
  // Normalize the stretches between post-Unicode-9.0 characters separately and copy those characters
  // through unchanged: as unassigned starters they block reordering and composition in HF's tables.
  size_t segment = 0, i = 0;
  while (i < in.size()) {
    const size_t at = i;
    if (static_cast<unsigned char>(in[i]) < 0xDF) {  // below U+07C0: never in the table
      i += (static_cast<unsigned char>(in[i]) < 0x80) ? 1 : 2;
      continue;
    }
    if (!newer_than_unicode9(next_code_point(in, i))) continue;
    map(form, in.substr(segment, at - segment), out);
    out.append(in.substr(at, i - at));
    segment = i;
  }
  map(form, in.substr(segment), out);
}

void Normalizer::map(Form form, std::string_view in, std::string& out) {
  if (in.empty()) return;
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Form::kNFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case Form::kNFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Form::kNFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Form::kNFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  utf8proc_ssize_t len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                      static_cast<utf8proc_ssize_t>(in.size()), &result,
                                      static_cast<utf8proc_option_t>(options));
  if (len < 0) {
    fail(ErrorKind::kInternal,
         std::string("tokenizer: unicode normalization failed: ") + utf8proc_errmsg(len));
  }
  std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> owned(result, &std::free);
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(len));
}

}  // namespace m3::tok
