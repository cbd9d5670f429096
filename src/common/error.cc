// Names of error kinds, used in logs and in the CLI's error lines.
#include "common/error.h"

namespace m3 {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kNotFound:
      return "not found";
    case ErrorKind::kCorruptData:
      return "corrupt data";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kResourceExhausted:
      return "resource exhausted";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "error";
}

}  // namespace m3
