// The attention shapes of real models (docs/design.md, "Model shapes"): the one table of
// presets the `fsdpa` command runs, plans and benchmarks.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace fsdpa::tool {

struct Preset {
  const char* name;
  const char* model;  // model / part
  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim_qk;
  int64_t head_dim_v;
  // Decoder self-attention: prefill is causal (bottom-right); encoders and
  // vision towers are bidirectional.
  bool causal;
  // Sliding window as Options::window_left (keys j >= i - window_left are
  // visible, the query's own key included); -1 = none.
  int64_t window_left;
  double softcap;    // Options::softcap (0: none)
  bool sinks;        // per-head attention-sink logits
  bool v_aliases_k;  // v is a view of the first Dv columns of k (MLA absorbed form)
  const char* notes;
};

// clang-format off
inline constexpr Preset kPresets[] = {
    {"llama3-8b",           "Llama-3 8B",                           32,   8, 128, 128, true,   -1,  0.0, false, false, "GQA 4"},
    {"qwen3-vl-vision",     "Qwen3-VL vision tower",                16,  16,  72,  72, false,  -1,  0.0, false, false, "hidden 1152 / 16 heads; hit MLX's fallback"},
    {"siglip-so400m",       "SigLIP so400m vision",                 16,  16,  72,  72, false,  -1,  0.0, false, false, "same width"},
    {"vit-h14",             "ViT-H/14",                             16,  16,  80,  80, false,  -1,  0.0, false, false, ""},
    {"clip-bigg",           "CLIP ViT-bigG/14",                     16,  16, 104, 104, false,  -1,  0.0, false, false, "1664 / 16"},
    {"phi3-mini",           "Phi-3 mini",                           32,  32,  96,  96, true,   -1,  0.0, false, false, ""},
    {"minicpm3",            "MiniCPM3 4B",                          40,  40,  96,  64, true,   -1,  0.0, false, false, "asymmetric q.k vs v"},
    {"deepseek-v3-prefill", "DeepSeek-V3 MLA, prefill form",       128, 128, 192, 128, true,   -1,  0.0, false, false, "128 nope + 64 rope"},
    {"deepseek-v3-decode",  "DeepSeek-V3 MLA, absorbed decode form", 128, 1, 576, 512, true,   -1,  0.0, false, true,  "v is the first 512 of the 576-wide latent k"},
    {"gemma2-9b",           "Gemma 2 9B",                           16,   8, 256, 256, true,   -1, 50.0, false, false, "logit softcap 50"},
    {"qwen3.6-35b",         "Qwen 3.6 35B-A3B full-attention layers", 16, 2, 256, 256, true,   -1,  0.0, false, false, "hit MLX's OOM at long context"},
    {"paligemma2",          "PaliGemma 2",                           8,   1, 288, 288, true,   -1,  0.0, false, false, "no shipped fused decode before"},
    {"gemma4-global",       "Gemma 4 26B/31B global layers",        16,   8, 512, 512, true,   -1,  0.0, false, false, "no fused path anywhere"},
    {"gpt-oss-20b",         "gpt-oss 20B",                          64,   8,  64,  64, true,  127,  0.0, true,  false, "attention sinks, sliding window of 128 keys (window_left 127)"},
    {"whisper-large",       "Whisper large encoder",                20,  20,  64,  64, false,  -1,  0.0, false, false, "encoder (bidirectional)"},
    {"odd-90",              "a 90-wide transformer",                16,  16,  90,  90, true,   -1,  0.0, false, false, "not a multiple of 8 or 16"},
};
// clang-format on

inline std::span<const Preset> presets() { return kPresets; }

inline const Preset* find_preset(std::string_view name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace fsdpa::tool
