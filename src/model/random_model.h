// Synthetic MiniMax-M3 models for speed work without the released weights: the preset configs (real widths of
// spec §1.3, or tiny) and the per-tensor scales and keys of random weights. Scales keep activations O(1):
// linear weights ~ N(0, 1/in), Gemma norm offsets ~ N(0, 0.1^2), routing bias ~ N(0, 0.1^2).
#pragma once

#include <cstdint>
#include <string>

#include "config/model_config.h"
#include "model/weight_layout.h"

namespace m3 {

// preset: "m3" (real widths; default layers 3+57) or "tiny" (default 1+3); layers: "DENSE+SPARSE" or empty.
ModelConfig random_model_config(const std::string& preset, const std::string& layers);

float random_weight_scale(const WeightSpec& spec);

// The generator key of a tensor: element i gets counter_gaussian(key + i) * scale.
uint64_t random_weight_key(uint64_t seed, const WeightSpec& spec);

}  // namespace m3
