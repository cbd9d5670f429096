// Video decoding with FFmpeg (media/libav.h): the container is read from memory through a custom AVIOContext,
// the best video stream is demuxed (once more first, counting packets, when the container does not say how
// many frames it holds), the sampled frames are decoded and converted to RGB24 by swscale. Every FFmpeg
// object lives in a small RAII holder so that a thrown m3::Error frees them.
#include "media/video_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.h"
#include "media/libav.h"

namespace m3::media {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  fail(ErrorKind::kInvalidArgument, message);
}

std::string av_message(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  libav().av_strerror(err, buf, sizeof buf);
  return buf;
}

// The bytes as an AVIOContext: reads and seeks over the span.
struct MemoryReader {
  std::span<const uint8_t> bytes;
  int64_t pos = 0;

  static int read(void* opaque, uint8_t* buf, int size) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const int64_t left = int64_t(r->bytes.size()) - r->pos;
    if (left <= 0) return AVERROR_EOF;
    const int n = int(std::min<int64_t>(size, left));
    std::memcpy(buf, r->bytes.data() + r->pos, size_t(n));
    r->pos += n;
    return n;
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* r = static_cast<MemoryReader*>(opaque);
    const int64_t size = int64_t(r->bytes.size());
    int64_t to = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case AVSEEK_SIZE:
        return size;
      case SEEK_SET:
        to = offset;
        break;
      case SEEK_CUR:
        to = r->pos + offset;
        break;
      case SEEK_END:
        to = size + offset;
        break;
      default:
        return AVERROR(EINVAL);
    }
    if (to < 0 || to > size) return AVERROR(EINVAL);
    r->pos = to;
    return to;
  }
};

// One opened container and its best video stream.
class Demuxer {
 public:
  explicit Demuxer(std::span<const uint8_t> bytes) : reader_{bytes} {
    try {
      open();
    } catch (...) {  // a constructor that throws runs no destructor
      release();
      throw;
    }
  }
  ~Demuxer() { release(); }
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;

  AVFormatContext* fmt() const { return fmt_; }
  AVStream* stream() const { return fmt_->streams[stream_index_]; }
  int stream_index() const { return stream_index_; }

 private:
  void open() {
    constexpr int kBuffer = 64 << 10;
    auto* buffer = static_cast<uint8_t*>(libav().av_malloc(kBuffer));
    if (!buffer) fail(ErrorKind::kInternal, "out of memory for the video reader");
    io_ = libav().avio_alloc_context(buffer, kBuffer, 0, &reader_, &MemoryReader::read, nullptr,
                                     &MemoryReader::seek);
    if (!io_) {
      libav().av_free(buffer);
      fail(ErrorKind::kInternal, "out of memory for the video reader");
    }
    fmt_ = libav().avformat_alloc_context();
    if (!fmt_) fail(ErrorKind::kInternal, "out of memory for the video reader");
    fmt_->pb = io_;
    fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
    if (int err = libav().avformat_open_input(&fmt_, nullptr, nullptr, nullptr); err < 0) {
      fmt_ = nullptr;  // freed by avformat_open_input
      invalid("not a video FFmpeg can read (" + av_message(err) + ")");
    }
    if (int err = libav().avformat_find_stream_info(fmt_, nullptr); err < 0)
      invalid("corrupt video: " + av_message(err));
    const std::string format = fmt_->iformat && fmt_->iformat->name ? fmt_->iformat->name : "";
    if (format == "image2" || format.ends_with("_pipe"))  // png_pipe, jpeg_pipe, webp_pipe, ...
      invalid("this is an image (" + format + "), not a video: send it as an image_url");
    stream_index_ = libav().av_find_best_stream(fmt_, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream_index_ < 0) invalid("the file has no video stream");
  }
  void release() {
    if (fmt_) libav().avformat_close_input(&fmt_);
    if (io_) {
      libav().av_freep(&io_->buffer);
      libav().avio_context_free(&io_);
    }
  }

  MemoryReader reader_;
  AVIOContext* io_ = nullptr;
  AVFormatContext* fmt_ = nullptr;
  int stream_index_ = -1;
};

struct PacketDeleter {
  void operator()(AVPacket* p) const { libav().av_packet_free(&p); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { libav().av_frame_free(&f); }
};
struct CodecDeleter {
  void operator()(AVCodecContext* c) const { libav().avcodec_free_context(&c); }
};
struct SwsDeleter {
  void operator()(SwsContext* s) const { libav().sws_freeContext(s); }
};

std::unique_ptr<AVPacket, PacketDeleter> make_packet() {
  AVPacket* p = libav().av_packet_alloc();
  if (!p) fail(ErrorKind::kInternal, "out of memory for a video packet");
  return std::unique_ptr<AVPacket, PacketDeleter>(p);
}

// Frames in the stream: what the container says, else a count of the stream's packets (one frame each).
int64_t count_frames(std::span<const uint8_t> bytes, const Demuxer& d, const VideoLimits& limits) {
  if (d.stream()->nb_frames > 0) return d.stream()->nb_frames;
  Demuxer again(bytes);
  auto pkt = make_packet();
  int64_t n = 0;
  while (libav().av_read_frame(again.fmt(), pkt.get()) >= 0) {
    if (pkt->stream_index == again.stream_index() && ++n > limits.max_stream_frames)
      invalid("the video has more than " + std::to_string(limits.max_stream_frames) + " frames");
    libav().av_packet_unref(pkt.get());
  }
  return n;
}

double stream_fps(const AVStream* s) {
  for (AVRational r : {s->avg_frame_rate, s->r_frame_rate})
    if (r.num > 0 && r.den > 0) return av_q2d(r);
  return 0;
}

}  // namespace

std::vector<int64_t> sample_frame_indices(int64_t total, double video_fps, const FrameSampling& sampling,
                                          int max_frames) {
  std::vector<int64_t> out;
  if (total <= 0) return out;
  auto linspace = [&](int64_t n) {
    n = std::min(n, total);
    if (n == 1) return std::vector<int64_t>{0};
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)  // numpy's linspace(0, total - 1, n), then astype(int)
      v[size_t(i)] = int64_t(double(i) * (double(total - 1) / double(n - 1)));
    v.back() = total - 1;
    return v;
  };
  if (sampling.num_frames > 0) return linspace(std::min<int64_t>(sampling.num_frames, max_frames));
  if (!(video_fps > 0) || !(sampling.fps > 0)) return {0};
  const double interval = 1.0 / sampling.fps, eps = 1e-4;
  double prev = 0;
  for (;;) {
    int64_t f = 0;
    if (!out.empty())
      f = std::max<int64_t>(int64_t(std::ceil((prev + interval - eps) * video_fps)), out.back() + 1);
    if (f >= total) break;
    out.push_back(f);
    prev = double(f) / video_fps;
    if (int64_t(out.size()) > max_frames) return linspace(max_frames);
  }
  const int64_t last = total - 1;
  if (out.back() != last && double(last) / video_fps - prev > eps) out.push_back(last);
  if (int64_t(out.size()) > max_frames) return linspace(max_frames);
  return out;
}

VideoInfo decode_video(std::span<const uint8_t> bytes, const FrameSampling& sampling,
                       const VideoLimits& limits, const std::function<void(RgbImage&&)>& sink) {
  if (bytes.size() > limits.max_bytes)
    invalid("the video is " + std::to_string(bytes.size()) + " bytes; the limit is " +
            std::to_string(limits.max_bytes) + " (--max-video-bytes)");
  if (bytes.empty()) invalid("the video is empty");
  libav();  // kUnsupported here when FFmpeg is not installed

  Demuxer d(bytes);
  const AVCodecParameters* par = d.stream()->codecpar;
  VideoInfo info;
  info.width = par->width;
  info.height = par->height;
  if (info.width <= 0 || info.height <= 0) invalid("the video stream has no frame size");
  if (int64_t(info.width) * info.height > limits.max_frame_pixels)
    invalid("the video's frames are " + std::to_string(info.width) + " x " + std::to_string(info.height) +
            " pixels; the limit is " + std::to_string(limits.max_frame_pixels) + " pixels");
  info.fps = stream_fps(d.stream());
  if (!(info.fps > 0)) invalid("the video stream has no frame rate");
  info.total_frames = count_frames(bytes, d, limits);
  if (info.total_frames > limits.max_stream_frames)
    invalid("the video has " + std::to_string(info.total_frames) + " frames; the limit is " +
            std::to_string(limits.max_stream_frames));
  if (info.total_frames <= 0) invalid("the video has no frames");
  const std::vector<int64_t> want =
      sample_frame_indices(info.total_frames, info.fps, sampling, limits.max_sampled_frames);

  const AVCodec* codec = libav().avcodec_find_decoder(par->codec_id);
  if (!codec)
    invalid("the video's codec (" + std::string(libav().avcodec_get_name(par->codec_id)) +
            ") is not supported");
  info.codec = codec->name;
  std::unique_ptr<AVCodecContext, CodecDeleter> dec(libav().avcodec_alloc_context3(codec));
  if (!dec) fail(ErrorKind::kInternal, "out of memory for the video decoder");
  if (int err = libav().avcodec_parameters_to_context(dec.get(), par); err < 0)
    invalid("corrupt video stream parameters: " + av_message(err));
  dec->thread_count = int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  if (int err = libav().avcodec_open2(dec.get(), codec, nullptr); err < 0)
    invalid("cannot open the " + info.codec + " decoder: " + av_message(err));

  auto pkt = make_packet();
  std::unique_ptr<AVFrame, FrameDeleter> frame(libav().av_frame_alloc());
  if (!frame) fail(ErrorKind::kInternal, "out of memory for a video frame");
  std::unique_ptr<SwsContext, SwsDeleter> sws;
  std::vector<uint8_t> scratch;  // swscale's output
  int64_t n = 0;                 // frames out of the decoder so far
  size_t next = 0;
  // Takes the decoder's frames; false once every wanted frame has been handed over.
  auto drain = [&]() {
    for (;;) {
      const int err = libav().avcodec_receive_frame(dec.get(), frame.get());
      if (err == AVERROR(EAGAIN) || err == AVERROR_EOF) return true;
      if (err < 0) return true;  // a broken frame: skipped, as the ffmpeg tool does
      if (++n > limits.max_stream_frames)
        invalid("the video has more than " + std::to_string(limits.max_stream_frames) + " frames");
      if (next < want.size() && n - 1 == want[next]) {
        if (int64_t(frame->width) * frame->height > limits.max_frame_pixels)
          invalid("a video frame is " + std::to_string(frame->width) + " x " + std::to_string(frame->height) +
                  " pixels; the limit is " + std::to_string(limits.max_frame_pixels) + " pixels");
        // The cached context is reused, or freed and replaced when the frame's size or format changed.
        sws.reset(libav().sws_getCachedContext(sws.release(), frame->width, frame->height,
                                               AVPixelFormat(frame->format), info.width, info.height,
                                               AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr));
        if (!sws) invalid("cannot convert the video's pixel format to RGB");
        // swscale's SIMD paths store whole vectors: rows get a 64-byte aligned stride and room past the end.
        const int row = info.width * 3, stride = (row + 63) / 64 * 64 + 64;
        scratch.resize(size_t(stride) * (info.height + 1) + 64);
        uint8_t* dst[4] = {scratch.data(), nullptr, nullptr, nullptr};
        int dst_stride[4] = {stride, 0, 0, 0};
        libav().sws_scale(sws.get(), frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
        RgbImage rgb;
        rgb.width = info.width;
        rgb.height = info.height;
        rgb.pixels.resize(size_t(row) * info.height);
        for (int y = 0; y < info.height; ++y)
          std::memcpy(rgb.pixels.data() + size_t(row) * y, scratch.data() + size_t(stride) * y, size_t(row));
        sink(std::move(rgb));
        info.indices.push_back(want[next++]);
      }
      libav().av_frame_unref(frame.get());
      if (next == want.size()) return false;
    }
  };
  bool more = true;
  while (more && libav().av_read_frame(d.fmt(), pkt.get()) >= 0) {
    if (pkt->stream_index == d.stream_index() && libav().avcodec_send_packet(dec.get(), pkt.get()) >= 0)
      more = drain();
    libav().av_packet_unref(pkt.get());
  }
  if (more && libav().avcodec_send_packet(dec.get(), nullptr) >= 0)
    drain();  // flush the decoder's delayed frames
  if (info.indices.empty()) invalid("no frame of the video could be decoded (" + info.codec + ")");
  return info;
}

VisionPatches preprocess_video_bytes(std::span<const uint8_t> bytes, const FrameSampling& sampling,
                                     const VideoLimits& limits, const ImageProcessorConfig& config,
                                     VideoInfo* info) {
  std::vector<RgbImage> frames;
  const VideoInfo decoded = decode_video(bytes, sampling, limits, [&](RgbImage&& f) {
    frames.push_back(resize_for_vision(std::move(f), config));
  });
  if (info) *info = decoded;
  return patchify_frames(frames, config);
}

bool video_decoding_available(std::string* why) {
  return libav_available(why);
}

}  // namespace m3::media
