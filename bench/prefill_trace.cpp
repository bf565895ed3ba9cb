// Where the wgmma prefill kernel's key-tile period goes: runs one fused
// prefill (bf16, contiguous BHSD, random inputs) in a -DFSDPA_PREFILL_TRACE=ON
// build, reads the phase stamps of its first blocks (src/cuda/prefill/trace.h)
// and prints, for each consumer phase, the median and mean SM cycles a key
// tile spends in it, over every traced tile past the first of every traced
// block; --csv writes the stamps themselves.
//
//   prefill_trace --dqk 256 --hq 16 --hkv 8 --lq 4096 --lk 4096 --causal --softcap 50
//                 [--csv FILE]
//
// The stamps are the SM clock's low 32 bits, so only differences within a
// block mean anything (-1 in the CSV: not stamped). The build's kernels
// carry the stamps (a clock read and a predicated store each; the capped
// 256/256 consumer spills 4 bytes for them): time the kernels in a normal
// build.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "cuda/prefill/trace.h"
#include "fsdpa/fsdpa.h"

namespace {

namespace fc = fsdpa::detail::cuda;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A device buffer of `count` bf16 values drawn from N(0, 1).
void* random_bf16(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> host(count);
  for (auto& x : host) x = fsdpa::detail::float_to_bf16(normal(rng));
  void* device = nullptr;
  check(cudaMalloc(&device, count * 2), "cudaMalloc");
  check(cudaMemcpy(device, host.data(), count * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  return device;
}

struct Span {
  const char* name;
  int from, to;  // phases (fc::TracePhase); to == kTracePhases: the next tile's top
};
constexpr Span kSpans[] = {
    {"turn wait (the other consumer's issue)", fc::kTraceTop, fc::kTraceTurn},
    {"issue S and P V, pass the turn", fc::kTraceTurn, fc::kTraceIssued},
    {"S wait", fc::kTraceIssued, fc::kTraceScores},
    {"softmax", fc::kTraceScores, fc::kTraceSoftmax},
    {"P V wait, O rescale", fc::kTraceSoftmax, fc::kTraceOutput},
    {"P to registers", fc::kTraceOutput, fc::kTraceP},
    {"release to the next tile", fc::kTraceP, fc::kTracePhases},
    {"period (top to top)", fc::kTraceTop, fc::kTracePhases},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the wgmma prefill kernel's phase trace (a -DFSDPA_PREFILL_TRACE=ON build)"};
  int64_t batch = 1, hq = 16, hkv = 8, lq = 4096, lk = 4096, dqk = 256, dv = 0;
  bool causal = false;
  double softcap = 0.0;
  std::string csv;
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--hq", hq)->check(CLI::PositiveNumber);
  app.add_option("--hkv", hkv)->check(CLI::PositiveNumber);
  app.add_option("--lq", lq)->check(CLI::PositiveNumber);
  app.add_option("--lk", lk)->check(CLI::PositiveNumber);
  app.add_option("--dqk", dqk)->check(CLI::PositiveNumber);
  app.add_option("--dv", dv, "[= dqk]");
  app.add_flag("--causal", causal, "bottom-right causal");
  app.add_option("--softcap", softcap)->check(CLI::NonNegativeNumber);
  app.add_option("--csv", csv, "write the stamps: block, role, tile, then one column a phase");
  CLI11_PARSE(app, argc, argv);
  if (dv == 0) dv = dqk;
  try {
    std::mt19937 rng(1);
    const fsdpa::Device cuda{fsdpa::DeviceType::CUDA, 0};
    const auto bf16 = fsdpa::DType::BF16;
    void* q = random_bf16(size_t(batch * hq * lq * dqk), rng);
    void* k = random_bf16(size_t(batch * hkv * lk * dqk), rng);
    void* v = random_bf16(size_t(batch * hkv * lk * dv), rng);
    void* out = nullptr;
    check(cudaMalloc(&out, size_t(batch * hq * lq * dv) * 2), "cudaMalloc");
    fsdpa::Tensors t;
    t.q = fsdpa::contiguous_view(q, bf16, {batch, hq, lq, dqk}, cuda);
    t.k = fsdpa::contiguous_view(k, bf16, {batch, hkv, lk, dqk}, cuda);
    t.v = fsdpa::contiguous_view(v, bf16, {batch, hkv, lk, dv}, cuda);
    t.out = fsdpa::contiguous_view(out, bf16, {batch, hq, lq, dv}, cuda);
    fsdpa::Options options;
    options.causal = causal;
    options.softcap = softcap;
    options.policy = fsdpa::Policy::ForceFused;
    const fsdpa::Plan plan = fsdpa::plan(fsdpa::describe(t, options), options);
    std::printf("%s\n", plan.explain().c_str());
    if (plan.kernel != "cuda_fused_prefill_hopper")
      throw std::runtime_error(
          "the trace stamps the wgmma prefill kernel only, and the plan runs " + plan.kernel);

    uint32_t* words = nullptr;
    const size_t bytes = fc::kTraceWords * sizeof(uint32_t);
    check(cudaMalloc(&words, bytes), "cudaMalloc");
    fc::set_prefill_trace(words);
    for (int warm = 0; warm < 3; ++warm) fsdpa::run(plan, t);
    check(cudaMemset(words, 0, bytes), "cudaMemset");
    fsdpa::run(plan, t);
    check(cudaDeviceSynchronize(), "the traced launch");
    fc::set_prefill_trace(nullptr);
    std::vector<uint32_t> stamps(fc::kTraceWords);
    check(cudaMemcpy(stamps.data(), words, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");

    auto at = [&](int block, int role, int tile, int phase) {
      return stamps[((size_t(block) * fc::kTraceRoles + role) * fc::kTraceTiles + tile) *
                        fc::kTracePhases +
                    phase];
    };
    std::vector<std::vector<double>> spans(std::size(kSpans));
    int traced_blocks = 0;
    std::ofstream file;
    if (!csv.empty()) {
      file.open(csv);
      file << "block,role,tile";
      for (int ph = 0; ph < fc::kTracePhases; ++ph) file << ",phase" << ph;
      file << "\n";
    }
    for (int block = 0; block < fc::kTraceBlocks; ++block) {
      // Cycles are differences of the clock's low 32 bits (modulo 2^32),
      // from the block's first consumer stamp.
      const uint32_t origin = at(block, 1, 0, fc::kTraceTop);
      if (origin == 0) continue;
      ++traced_blocks;
      for (int role = 0; role < fc::kTraceRoles; ++role)
        for (int tile = 0; tile < fc::kTraceTiles; ++tile) {
          bool any = false;
          for (int ph = 0; ph < fc::kTracePhases; ++ph) any = any || at(block, role, tile, ph) != 0;
          if (!any) continue;
          if (file.is_open()) {
            file << block << "," << role << "," << tile;
            for (int ph = 0; ph < fc::kTracePhases; ++ph) {
              const uint32_t s = at(block, role, tile, ph);
              file << "," << (s != 0 ? static_cast<int32_t>(s - origin) : -1);
            }
            file << "\n";
          }
          // The consumers' tiles past the first (the first has no P V to
          // issue), up to the last one whose next tile was stamped.
          if (role == 0 || tile == 0 || tile + 1 >= fc::kTraceTiles) continue;
          bool whole = at(block, role, tile + 1, fc::kTraceTop) != 0;
          for (int ph = 0; ph < fc::kTracePhases; ++ph) whole = whole && at(block, role, tile, ph);
          if (!whole) continue;
          for (size_t s = 0; s < std::size(kSpans); ++s) {
            const auto end = kSpans[s].to == fc::kTracePhases
                                 ? at(block, role, tile + 1, fc::kTraceTop)
                                 : at(block, role, tile, kSpans[s].to);
            spans[s].push_back(static_cast<double>(
                static_cast<uint32_t>(end - at(block, role, tile, kSpans[s].from))));
          }
        }
    }
    std::printf("traced blocks: %d, consumer tiles: %zu\n", traced_blocks, spans[0].size());
    std::printf("%-42s %10s %10s\n", "phase of a key tile (SM cycles)", "median", "mean");
    for (size_t s = 0; s < std::size(kSpans); ++s) {
      std::vector<double>& x = spans[s];
      if (x.empty()) continue;
      std::nth_element(x.begin(), x.begin() + x.size() / 2, x.end());
      double mean = 0;
      for (double d : x) mean += d / static_cast<double>(x.size());
      std::printf("%-42s %10.0f %10.0f\n", kSpans[s].name, x[x.size() / 2], mean);
    }
    check(cudaFree(words), "cudaFree");
    for (void* p : {q, k, v, out}) check(cudaFree(p), "cudaFree");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefill_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
