// Video bytes -> the sampled frames as 8-bit RGB, with FFmpeg's libavformat / libavcodec / libswscale (any
// container and codec Debian's FFmpeg reads: MP4, WebM, MKV, AVI, MOV, ...). Frames are numbered in the
// decoder's output order and picked as vLLM's MiniMax-M3 video loader picks them (sample_frame_indices); the
// timestamps the prompt shows are index / the stream's frame rate. The colour conversion is swscale's
// bicubic YUV -> RGB24, as the ffmpeg command line and OpenCV's FFmpeg backend (vLLM's loader) do it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "media/image_decode.h"
#include "media/image_preprocess.h"

namespace m3::media {

struct VideoLimits {
  size_t max_bytes = size_t(256) << 20;             // the encoded size (--max-video-bytes)
  int64_t max_frame_pixels = int64_t(4096) * 4096;  // width x height of one frame, from the header
  int64_t max_stream_frames = 200000;  // frames in the stream (each is demuxed, sampled ones decoded)
  int max_sampled_frames = 768;        // more samples than this are thinned uniformly to it
};

// Which frames to take: `fps` samples per second of video (the processor's default 1.0), or, when
// num_frames > 0, that many spread evenly from the first frame to the last (vLLM's `num_frames`).
struct FrameSampling {
  double fps = 1.0;
  int num_frames = 0;
};

struct VideoInfo {
  int width = 0, height = 0;
  double fps = 0;                // the stream's frame rate: a frame's timestamp is its index / fps
  int64_t total_frames = 0;      // frames in the stream
  std::vector<int64_t> indices;  // the frames taken, ascending; the sink got them in this order
  std::string codec;             // the decoder's name, e.g. "h264"
};

// Frame indices for a stream of `total` frames at `video_fps`: with sampling.num_frames > 0, linspace(0,
// total - 1, num_frames) truncated (all frames when there are fewer); otherwise vLLM's MiniMax-M3 backend:
// frame 0, then each first frame at least 1 / fps seconds (less 1e-4) after the last one taken, then the last
// frame when it lies beyond that; at most max_frames (else linspace over max_frames).
std::vector<int64_t> sample_frame_indices(int64_t total, double video_fps, const FrameSampling& sampling,
                                          int max_frames);

// Decodes the frames sample_frame_indices picks and hands each to `sink` as it is decoded (so a caller can
// shrink it before the next one arrives). Throws m3::Error(kInvalidArgument) for bytes that are not a video
// FFmpeg can read, a stream without frames, or a limit crossed, with a message a client can act on.
VideoInfo decode_video(std::span<const uint8_t> bytes, const FrameSampling& sampling,
                       const VideoLimits& limits, const std::function<void(RgbImage&&)>& sink);

// A video's bytes to the vision tower's input: decode_video, each frame brought to the video processor's size
// (resize_for_vision) as it arrives so that decoded frames never pile up, then patchify_frames. `info`, when
// given, gets decode_video's answer (the frames' indices and rate, for the prompt's timestamps).
VisionPatches preprocess_video_bytes(std::span<const uint8_t> bytes, const FrameSampling& sampling,
                                     const VideoLimits& limits, const ImageProcessorConfig& config,
                                     VideoInfo* info = nullptr);

// Whether FFmpeg's libraries could be loaded here (media/libav.h); `why` gets the reason when not.
bool video_decoding_available(std::string* why = nullptr);

}  // namespace m3::media
