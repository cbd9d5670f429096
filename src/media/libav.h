// FFmpeg's libavformat / libavcodec / libswscale / libavutil, opened with dlopen on first use (the sonames
// of the major versions these headers describe, e.g. libavcodec.so.59). The server binary and its bundle do
// not link them: FFmpeg and its codec libraries are ~165 MB, needed only by video input. Where they are not
// installed, video requests get a clear error naming the packages and everything else works.
#pragma once

#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

namespace m3::media {

// The entry points video decoding calls, by their FFmpeg names.
#define M3_LIBAV_FUNCTIONS(X)               \
  X(avutil, av_log_set_level)               \
  X(avutil, av_strerror)                    \
  X(avutil, av_malloc)                      \
  X(avutil, av_free)                        \
  X(avutil, av_freep)                       \
  X(avutil, av_frame_alloc)                 \
  X(avutil, av_frame_free)                  \
  X(avutil, av_frame_unref)                 \
  X(avformat, avio_alloc_context)           \
  X(avformat, avio_context_free)            \
  X(avformat, avformat_alloc_context)       \
  X(avformat, avformat_open_input)          \
  X(avformat, avformat_find_stream_info)    \
  X(avformat, av_find_best_stream)          \
  X(avformat, avformat_close_input)         \
  X(avformat, av_read_frame)                \
  X(avcodec, av_packet_alloc)               \
  X(avcodec, av_packet_free)                \
  X(avcodec, av_packet_unref)               \
  X(avcodec, avcodec_find_decoder)          \
  X(avcodec, avcodec_get_name)              \
  X(avcodec, avcodec_alloc_context3)        \
  X(avcodec, avcodec_free_context)          \
  X(avcodec, avcodec_parameters_to_context) \
  X(avcodec, avcodec_open2)                 \
  X(avcodec, avcodec_send_packet)           \
  X(avcodec, avcodec_receive_frame)         \
  X(swscale, sws_getCachedContext)          \
  X(swscale, sws_freeContext)               \
  X(swscale, sws_scale)

struct Libav {
#define M3_LIBAV_MEMBER(lib, fn) decltype(&::fn) fn = nullptr;
  M3_LIBAV_FUNCTIONS(M3_LIBAV_MEMBER)
#undef M3_LIBAV_MEMBER
};

// The loaded libraries. Throws m3::Error(kUnsupported) naming what is missing and the Debian packages that
// provide it.
const Libav& libav();

// Whether video decoding is available here; `why` gets the reason when not.
bool libav_available(std::string* why = nullptr);

}  // namespace m3::media
