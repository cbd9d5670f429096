// Bounded, streaming undo of a request body's Content-Encoding (gzip / x-gzip, deflate, br, chains of them).
// The inflated size is held to the same limit as the wire body: decoding stops the moment it is crossed, so a
// compression bomb costs at most the limit plus one output chunk of memory.
#pragma once

#include <cstddef>
#include <string>

#include "http/message.h"

namespace m3::http {

struct DecodeOutcome {
  int status = 0;  // 0: the body is decoded; else 400 (corrupt), 413 (too large), 415 (encoding refused)
  std::string message;
};

// Decodes request.body in place, then drops Content-Encoding and rewrites Content-Length (when present) to
// the decoded size. `enabled == false` refuses every coding but identity with 415.
DecodeOutcome decode_request_body(Request& request, size_t max_bytes, bool enabled);

}  // namespace m3::http
