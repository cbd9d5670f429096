#!/usr/bin/env bash
# Writes the fixture videos (tests/fixtures/vision/videos) with the ffmpeg command line, and what it decodes them
# to: NAME.rgb, every frame as rgb24 (`ffmpeg -i V -f rawvideo -pix_fmt rgb24`), the decoding reference of
# tests/media/video_decode_test.cc and the input of tools/goldens/make_video_goldens.py.
# - clip.mp4: H.264 (yuv420p) in MP4, 84 x 56, 4 fps, 10 frames: 1 fps sampling takes 0, 4, 8 and the last;
# - tall.webm: VP8 in WebM (no frame count in the container: decode_video counts packets), 50 x 90, 2 fps, 11;
# - long.avi: Motion JPEG in AVI (full-range yuvj420p), 56 x 56, 1 fps, 10 frames: 5 temporal patches, two
#   attention segments.
set -euo pipefail
cd "$(dirname "$0")/../../tests/fixtures/vision/videos"
q="-hide_banner -loglevel error -y"
ffmpeg $q -f lavfi -i "testsrc=size=84x56:rate=4:duration=2.5" -c:v libx264 -pix_fmt yuv420p -preset veryfast \
  -crf 18 -movflags +faststart clip.mp4
ffmpeg $q -f lavfi -i "mandelbrot=size=50x90:rate=2,trim=duration=5.5" -c:v libvpx -b:v 200k -pix_fmt yuv420p tall.webm
ffmpeg $q -f lavfi -i "testsrc2=size=56x56:rate=1:duration=10" -c:v mjpeg -q:v 3 -pix_fmt yuvj420p long.avi
for f in clip.mp4 tall.webm long.avi; do ffmpeg $q -i "$f" -f rawvideo -pix_fmt rgb24 "${f%.*}.rgb"; done
