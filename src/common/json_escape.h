// JSON string escaping exactly as Python's json.dumps writes it (the format of transformers' tojson and of
// the tool-call arguments vLLM returns): \" \\ \b \f \n \r \t, other control bytes as \u00XX, everything else
// as is.
#pragma once

#include <string>
#include <string_view>

namespace m3 {

// Appends the escaped body of a JSON string (no quotes) for UTF-8 text `s` (ensure_ascii=False).
void append_json_escaped(std::string& out, std::string_view s);
// Appends one ASCII byte (< 0x80), escaped the same way.
void append_json_escaped_ascii(std::string& out, unsigned char c);

}  // namespace m3
