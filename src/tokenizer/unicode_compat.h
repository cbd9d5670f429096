// Pins Unicode property data to the versions HF tokenizers 0.23 runs on, so that results do not depend on
// the system libraries' Unicode versions: normalization on Unicode 9.0 (unicode-normalization-alignments
// 0.1.12) and regex properties on Unicode 16.0 (Oniguruma 6.9.10), while utf8proc here is 15.0 and PCRE2
// is 14.0. Both tables (in the .cc) were derived offline and checked against HF over every code point.
#pragma once

#include <string>
#include <string_view>

namespace m3::tok {

// Code points Unicode 9.0 lacks that later data gives a decomposition, a nonzero combining class, or a
// place inside another character's decomposition; HF's normalizers treat them as inert unassigned starters.
bool newer_than_unicode9(char32_t cp);

// Class-body text ("\x{897}\x{1C89}-\x{1C8A}...") listing the code points that Unicode 15.0-16.0 added to
// general category `property` (L, Lu, Ll, Lt, Lm, Lo, M, Mn, Mc, Me, N, Nd, Nl, No), which PCRE2's Unicode
// 14.0 tables still call unassigned. Empty for other properties.
std::string unicode16_additions(std::string_view property);

// Whether `text` (valid UTF-8) holds any code point listed by unicode16_additions(); text without one can be
// matched with PCRE2's own tables.
bool contains_unicode16_addition(std::string_view text);

}  // namespace m3::tok
