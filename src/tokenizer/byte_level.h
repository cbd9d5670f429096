// The GPT-2 byte-level alphabet: a bijection between the 256 byte values and 256 printable code points, used
// by the ByteLevel pre-tokenizer (bytes -> vocabulary spelling) and decoder (spelling -> bytes). Printable
// Latin-1 bytes map to themselves; the other 68 bytes map, in byte order, to U+0100 upwards.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace m3::tok {

char32_t byte_to_char(uint8_t b);

// The byte a code point stands for, or -1 when the code point is not in the alphabet.
int char_to_byte(char32_t cp);

// The vocabulary spelling of raw bytes (each byte becomes one alphabet character).
std::string byte_level_spelling(std::string_view bytes);

// Appends the bytes a token stands for, as HF's ByteLevel decoder does: when every character of the token
// is in the alphabet, the mapped bytes; otherwise (added tokens such as "]<]start of image[>[", which holds a
// plain space) the token's own UTF-8 bytes. `token` must be valid UTF-8.
void append_token_bytes(std::string_view token, std::string& out);

}  // namespace m3::tok
