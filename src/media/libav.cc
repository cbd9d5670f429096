// Opens FFmpeg's libraries once per process and resolves the entry points of M3_LIBAV_FUNCTIONS.
#include "media/libav.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"

namespace m3::media {
namespace {

#define M3_SONAME(lib, major) "lib" #lib ".so." AV_STRINGIFY(major)

struct Loaded {
  Libav fns;
  std::string error;  // empty when every library and symbol resolved
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    struct Lib {
      const char* name;
      void* handle;
    };
    // avutil first: the others need its symbols.
    Lib avutil{M3_SONAME(avutil, LIBAVUTIL_VERSION_MAJOR), nullptr};
    Lib avcodec{M3_SONAME(avcodec, LIBAVCODEC_VERSION_MAJOR), nullptr};
    Lib avformat{M3_SONAME(avformat, LIBAVFORMAT_VERSION_MAJOR), nullptr};
    Lib swscale{M3_SONAME(swscale, LIBSWSCALE_VERSION_MAJOR), nullptr};
    for (Lib* lib : {&avutil, &avcodec, &avformat, &swscale}) {
      lib->handle = dlopen(lib->name, RTLD_NOW | RTLD_LOCAL);
      if (!lib->handle) {
        r.error = std::string("cannot load ") + lib->name + " (" + dlerror() + ")";
        return r;
      }
    }
#define M3_LIBAV_RESOLVE(lib, fn)                                          \
  r.fns.fn = reinterpret_cast<decltype(r.fns.fn)>(dlsym(lib.handle, #fn)); \
  if (!r.fns.fn) {                                                         \
    r.error = std::string(lib.name) + " has no " #fn;                      \
    return r;                                                              \
  }
    M3_LIBAV_FUNCTIONS(M3_LIBAV_RESOLVE)
#undef M3_LIBAV_RESOLVE
    r.fns.av_log_set_level(AV_LOG_QUIET);  // errors come back as codes, turned into messages here
    return r;
  }();
  return l;
}

}  // namespace

const Libav& libav() {
  const Loaded& l = loaded();
  if (!l.error.empty())
    fail(ErrorKind::kUnsupported,
         "video input needs FFmpeg's libraries on the server (Debian: libavformat59 libavcodec59 "
         "libswscale6): " +
             l.error);
  return l.fns;
}

bool libav_available(std::string* why) {
  const Loaded& l = loaded();
  if (why) *why = l.error;
  return l.error.empty();
}

}  // namespace m3::media
