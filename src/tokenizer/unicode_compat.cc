// Unicode version pins (see unicode_compat.h). kNewerThanUnicode9 was generated from Unicode 14
// Present_In=9.0 (perl Unicode::UCD) and utf8proc 2.8 (Unicode 15.0) properties. kUnicode16Additions holds
// the letters, marks and numbers assigned in Unicode 15.0 and 16.0 with their general category (from ICU 78);
// together with PCRE2 10.42 it reproduced HF tokenizers 0.23.2 on all 1,112,064 scalar values.
#include "tokenizer/unicode_compat.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "tokenizer/utf8.h"

namespace m3::tok {
namespace {

struct Range {
  char32_t first, last;
};

constexpr Range kNewerThanUnicode9[] = {
    {0x07FD, 0x07FD},   {0x0898, 0x089F},   {0x08CA, 0x08D3},   {0x09FE, 0x09FE},   {0x0C3C, 0x0C3C},
    {0x0D3B, 0x0D3C},   {0x0EBA, 0x0EBA},   {0x1715, 0x1715},   {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},
    {0x32FF, 0x32FF},   {0xA7F2, 0xA7F4},   {0xA82C, 0xA82C},   {0xAB66, 0xAB67},   {0xAB69, 0xAB69},
    {0x10781, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC},
    {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x1133B, 0x1133B},
    {0x1145E, 0x1145E}, {0x11839, 0x1183A}, {0x11930, 0x11930}, {0x11935, 0x11935}, {0x11938, 0x11938},
    {0x1193D, 0x1193E}, {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97}, {0x11F41, 0x11F42},
    {0x16FF0, 0x16FF1}, {0x1DF04, 0x1DF06}, {0x1DF08, 0x1DF08}, {0x1DF0A, 0x1DF0A}, {0x1DF1E, 0x1DF1E},
    {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136}, {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF},
    {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9},
};

struct CategoryRange {
  char32_t first, last;
  char major, minor;  // general category, e.g. 'L','o'
};

constexpr CategoryRange kUnicode16Additions[] = {
    {0x897, 0x897, 'M', 'n'},     {0xCF3, 0xCF3, 'M', 'c'},     {0xECE, 0xECE, 'M', 'n'},
    {0x1C89, 0x1C89, 'L', 'u'},   {0x1C8A, 0x1C8A, 'L', 'l'},   {0xA7CB, 0xA7CC, 'L', 'u'},
    {0xA7CD, 0xA7CD, 'L', 'l'},   {0xA7DA, 0xA7DA, 'L', 'u'},   {0xA7DB, 0xA7DB, 'L', 'l'},
    {0xA7DC, 0xA7DC, 'L', 'u'},   {0x105C0, 0x105F3, 'L', 'o'}, {0x10D40, 0x10D49, 'N', 'd'},
    {0x10D4A, 0x10D4D, 'L', 'o'}, {0x10D4E, 0x10D4E, 'L', 'm'}, {0x10D4F, 0x10D4F, 'L', 'o'},
    {0x10D50, 0x10D65, 'L', 'u'}, {0x10D69, 0x10D6D, 'M', 'n'}, {0x10D6F, 0x10D6F, 'L', 'm'},
    {0x10D70, 0x10D85, 'L', 'l'}, {0x10EC2, 0x10EC4, 'L', 'o'}, {0x10EFC, 0x10EFF, 'M', 'n'},
    {0x1123F, 0x11240, 'L', 'o'}, {0x11241, 0x11241, 'M', 'n'}, {0x11380, 0x11389, 'L', 'o'},
    {0x1138B, 0x1138B, 'L', 'o'}, {0x1138E, 0x1138E, 'L', 'o'}, {0x11390, 0x113B5, 'L', 'o'},
    {0x113B7, 0x113B7, 'L', 'o'}, {0x113B8, 0x113BA, 'M', 'c'}, {0x113BB, 0x113C0, 'M', 'n'},
    {0x113C2, 0x113C2, 'M', 'c'}, {0x113C5, 0x113C5, 'M', 'c'}, {0x113C7, 0x113CA, 'M', 'c'},
    {0x113CC, 0x113CD, 'M', 'c'}, {0x113CE, 0x113CE, 'M', 'n'}, {0x113CF, 0x113CF, 'M', 'c'},
    {0x113D0, 0x113D0, 'M', 'n'}, {0x113D1, 0x113D1, 'L', 'o'}, {0x113D2, 0x113D2, 'M', 'n'},
    {0x113D3, 0x113D3, 'L', 'o'}, {0x113E1, 0x113E2, 'M', 'n'}, {0x116D0, 0x116E3, 'N', 'd'},
    {0x11BC0, 0x11BE0, 'L', 'o'}, {0x11BF0, 0x11BF9, 'N', 'd'}, {0x11F00, 0x11F01, 'M', 'n'},
    {0x11F02, 0x11F02, 'L', 'o'}, {0x11F03, 0x11F03, 'M', 'c'}, {0x11F04, 0x11F10, 'L', 'o'},
    {0x11F12, 0x11F33, 'L', 'o'}, {0x11F34, 0x11F35, 'M', 'c'}, {0x11F36, 0x11F3A, 'M', 'n'},
    {0x11F3E, 0x11F3F, 'M', 'c'}, {0x11F40, 0x11F40, 'M', 'n'}, {0x11F41, 0x11F41, 'M', 'c'},
    {0x11F42, 0x11F42, 'M', 'n'}, {0x11F50, 0x11F59, 'N', 'd'}, {0x11F5A, 0x11F5A, 'M', 'n'},
    {0x1342F, 0x1342F, 'L', 'o'}, {0x13440, 0x13440, 'M', 'n'}, {0x13441, 0x13446, 'L', 'o'},
    {0x13447, 0x13455, 'M', 'n'}, {0x13460, 0x143FA, 'L', 'o'}, {0x16100, 0x1611D, 'L', 'o'},
    {0x1611E, 0x16129, 'M', 'n'}, {0x1612A, 0x1612C, 'M', 'c'}, {0x1612D, 0x1612F, 'M', 'n'},
    {0x16130, 0x16139, 'N', 'd'}, {0x16D40, 0x16D42, 'L', 'm'}, {0x16D43, 0x16D6A, 'L', 'o'},
    {0x16D6B, 0x16D6C, 'L', 'm'}, {0x16D70, 0x16D79, 'N', 'd'}, {0x18CFF, 0x18CFF, 'L', 'o'},
    {0x1B132, 0x1B132, 'L', 'o'}, {0x1B155, 0x1B155, 'L', 'o'}, {0x1CCF0, 0x1CCF9, 'N', 'd'},
    {0x1D2C0, 0x1D2D3, 'N', 'o'}, {0x1DF25, 0x1DF2A, 'L', 'l'}, {0x1E030, 0x1E06D, 'L', 'm'},
    {0x1E08F, 0x1E08F, 'M', 'n'}, {0x1E4D0, 0x1E4EA, 'L', 'o'}, {0x1E4EB, 0x1E4EB, 'L', 'm'},
    {0x1E4EC, 0x1E4EF, 'M', 'n'}, {0x1E4F0, 0x1E4F9, 'N', 'd'}, {0x1E5D0, 0x1E5ED, 'L', 'o'},
    {0x1E5EE, 0x1E5EF, 'M', 'n'}, {0x1E5F0, 0x1E5F0, 'L', 'o'}, {0x1E5F1, 0x1E5FA, 'N', 'd'},
    {0x2B739, 0x2B739, 'L', 'o'}, {0x2EBF0, 0x2EE5D, 'L', 'o'}, {0x31350, 0x323AF, 'L', 'o'},
};

void append_code_point_escape(char32_t cp, std::string& out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(cp));
  out += buf;
}

}  // namespace

bool newer_than_unicode9(char32_t cp) {
  if (cp < kNewerThanUnicode9[0].first) return false;
  auto it = std::upper_bound(std::begin(kNewerThanUnicode9), std::end(kNewerThanUnicode9), cp,
                             [](char32_t c, const Range& r) { return c < r.first; });
  return it != std::begin(kNewerThanUnicode9) && cp <= std::prev(it)->last;
}

std::string unicode16_additions(std::string_view property) {
  if (property.empty() || property.size() > 2) return {};
  const char major = property[0];
  if (major != 'L' && major != 'M' && major != 'N') return {};
  const char minor = property.size() == 2 ? property[1] : 0;
  std::string out;
  for (const CategoryRange& r : kUnicode16Additions) {
    if (r.major != major || (minor != 0 && r.minor != minor)) continue;
    append_code_point_escape(r.first, out);
    if (r.last != r.first) {
      out += '-';
      append_code_point_escape(r.last, out);
    }
  }
  return out;
}

bool contains_unicode16_addition(std::string_view text) {
  constexpr char32_t kFirst = kUnicode16Additions[0].first;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0xE0) {  // below U+0800, under every entry
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    const char32_t cp = next_code_point(text, i);
    if (cp < kFirst) continue;
    auto it = std::upper_bound(std::begin(kUnicode16Additions), std::end(kUnicode16Additions), cp,
                               [](char32_t c, const CategoryRange& r) { return c < r.first; });
    if (it != std::begin(kUnicode16Additions) && cp <= std::prev(it)->last) return true;
  }
  return false;
}

}  // namespace m3::tok
