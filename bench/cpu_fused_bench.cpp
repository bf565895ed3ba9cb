// CPU fused path vs a materializing attention on OpenBLAS sgemm.
//
//   cpu_fused_bench [--reps N] [--json FILE] [--markdown FILE] [--quick]
//
// Cases (f32, BHSD, not causal): B=1 H=8 D=128 at Lq=Lk=2048 and at
// Lq=2048 Lk=16384. For each: median time of --reps runs after one warm-up,
// GFLOP/s with FLOPs = 2*B*H*Lq*Lk*(Dqk+Dv), the share of the OpenBLAS sgemm
// rate measured in the same run (2048^3), transient memory of each path
// (fused: the plan's workspace; materializing: its Lq x Lk score buffer) and
// the peak RSS growth of one call of each, and the error of both paths
// against each other and against float64 on sampled rows.
//
// The materializing path: for each (b, h): S = scale * Q K^T (cblas_sgemm),
// row softmax (threads over rows), O = P V (cblas_sgemm). OpenBLAS and the
// fused path use the same number of threads (all cores unless
// FSDPA_NUM_THREADS / OPENBLAS_NUM_THREADS say otherwise).
#include <cblas.h>
#include <sys/utsname.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fsdpa/fsdpa.h"
#include "json_file.h"

extern "C" {
char* openblas_get_config(void);
char* openblas_get_corename(void);
int openblas_get_num_threads(void);
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median seconds of `reps` calls after one warm-up call.
double time_median(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    times.push_back(seconds_since(start));
  }
  return median(times);
}

// ------------------------------------------------------------ memory

long status_kib(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(key);
  while (std::getline(status, line))
    if (line.compare(0, len, key) == 0) return std::strtol(line.c_str() + len, nullptr, 10);
  return -1;
}

// Peak RSS growth (bytes) of one call: resets the high-water mark (Linux
// /proc/self/clear_refs "5"), runs, reads VmHWM - VmRSS before. -1 when the
// kernel does not allow the reset.
double peak_rss_growth(const std::function<void()>& fn) {
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    if (!clear) return -1.0;
  }
  const long before = status_kib("VmRSS:");
  fn();
  const long peak = status_kib("VmHWM:");
  if (before < 0 || peak < 0) return -1.0;
  return static_cast<double>(peak - before) * 1024.0;
}

// ------------------------------------------------------------ paths

struct Shape {
  int64_t batch, heads, len_q, len_k, dim;
};

double flops(const Shape& s) {
  return 2.0 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.len_q) *
         static_cast<double>(s.len_k) * static_cast<double>(2 * s.dim);
}

fsdpa::Tensors make_tensors(const Shape& s, float* q, float* k, float* v, float* out) {
  fsdpa::Tensors t;
  t.q = fsdpa::contiguous_view(q, fsdpa::DType::F32, {s.batch, s.heads, s.len_q, s.dim});
  t.k = fsdpa::contiguous_view(k, fsdpa::DType::F32, {s.batch, s.heads, s.len_k, s.dim});
  t.v = fsdpa::contiguous_view(v, fsdpa::DType::F32, {s.batch, s.heads, s.len_k, s.dim});
  t.out = fsdpa::contiguous_view(out, fsdpa::DType::F32, {s.batch, s.heads, s.len_q, s.dim});
  return t;
}

// Softmax of each row of s (rows x cols), in place, over `threads` threads.
void softmax_rows(float* s, int64_t rows, int64_t cols, int threads) {
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = s + r * cols;
      float top = row[0];
      for (int64_t j = 1; j < cols; ++j) top = std::max(top, row[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < cols; ++j) {
        row[j] = std::exp(row[j] - top);
        sum += row[j];
      }
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < cols; ++j) row[j] *= inv;
    }
  };
  std::vector<std::thread> pool;
  const int64_t per = (rows + threads - 1) / threads;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(work, std::min(rows, t * per), std::min(rows, (t + 1) * per));
  work(0, std::min(rows, per));
  for (std::thread& th : pool) th.join();
}

// The materializing path; scores holds len_q x len_k floats.
void materializing(const Shape& s, const float* q, const float* k, const float* v, float* out,
                   float* scores, int threads) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
  const int m = static_cast<int>(s.len_q), n = static_cast<int>(s.len_k),
            d = static_cast<int>(s.dim);
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    const float* qh = q + bh * s.len_q * s.dim;
    const float* kh = k + bh * s.len_k * s.dim;
    const float* vh = v + bh * s.len_k * s.dim;
    float* oh = out + bh * s.len_q * s.dim;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, scale, qh, d, kh, d, 0.0f, scores,
                n);
    softmax_rows(scores, s.len_q, s.len_k, threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n, 1.0f, scores, n, vh, d, 0.0f,
                oh, d);
  }
}

// float64 attention of one query row (b = 0).
void reference_row(const Shape& s, const float* q, const float* k, const float* v, int64_t h,
                   int64_t row, std::vector<double>& out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.dim));
  std::vector<double> scores(static_cast<size_t>(s.len_k));
  const float* qr = q + (h * s.len_q + row) * s.dim;
  double top = -INFINITY;
  for (int64_t j = 0; j < s.len_k; ++j) {
    const float* kr = k + (h * s.len_k + j) * s.dim;
    double dot = 0.0;
    for (int64_t d = 0; d < s.dim; ++d) dot += static_cast<double>(qr[d]) * kr[d];
    scores[static_cast<size_t>(j)] = scale * dot;
    top = std::max(top, scale * dot);
  }
  out.assign(static_cast<size_t>(s.dim), 0.0);
  double sum = 0.0;
  for (int64_t j = 0; j < s.len_k; ++j) {
    const double w = std::exp(scores[static_cast<size_t>(j)] - top);
    sum += w;
    const float* vr = v + (h * s.len_k + j) * s.dim;
    for (int64_t d = 0; d < s.dim; ++d) out[static_cast<size_t>(d)] += w * vr[d];
  }
  for (double& x : out) x /= sum;
}

struct Result {
  Shape shape;
  double fused_s = 0, mat_s = 0;
  double fused_gflops = 0, mat_gflops = 0, fused_share = 0, mat_share = 0;
  double fused_bytes = 0, mat_bytes = 0, fused_rss = 0, mat_rss = 0;
  double max_diff = 0, rel_diff = 0, fused_err64 = 0, mat_err64 = 0;
  int64_t tile_q = 0, tile_k = 0;
  int threads = 0;
};

Result run_case(const Shape& s, int reps, double sgemm_gflops) {
  Result r;
  r.shape = s;
  const size_t nq = static_cast<size_t>(s.batch * s.heads * s.len_q * s.dim);
  const size_t nk = static_cast<size_t>(s.batch * s.heads * s.len_k * s.dim);
  std::vector<float> q(nq), k(nk), v(nk), out_fused(nq), out_mat(nq);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);

  fsdpa::Tensors t = make_tensors(s, q.data(), k.data(), v.data(), out_fused.data());
  fsdpa::Options options;
  options.policy = fsdpa::Policy::ForceFused;
  const fsdpa::Plan plan = fsdpa::plan(fsdpa::describe(t, options), options);
  r.tile_q = plan.tile_q;
  r.tile_k = plan.tile_k;
  r.threads = plan.num_threads;
  r.fused_bytes = static_cast<double>(plan.workspace_bytes);
  r.mat_bytes = static_cast<double>(s.len_q * s.len_k) * sizeof(float);

  // Peak RSS of one call each, allocating as a user would.
  r.fused_rss = peak_rss_growth([&] { fsdpa::attention(t, options); });
  r.mat_rss = peak_rss_growth([&] {
    std::unique_ptr<float[]> scores(new float[static_cast<size_t>(s.len_q * s.len_k)]);
    materializing(s, q.data(), k.data(), v.data(), out_mat.data(), scores.get(), plan.num_threads);
  });

  std::vector<std::byte> workspace(plan.workspace_bytes);
  r.fused_s = time_median(reps, [&] { fsdpa::run(plan, t, workspace.data(), workspace.size()); });
  std::vector<float> scores(static_cast<size_t>(s.len_q * s.len_k));
  r.mat_s = time_median(reps, [&] {
    materializing(s, q.data(), k.data(), v.data(), out_mat.data(), scores.data(), plan.num_threads);
  });
  r.fused_gflops = flops(s) / r.fused_s * 1e-9;
  r.mat_gflops = flops(s) / r.mat_s * 1e-9;
  r.fused_share = r.fused_gflops / sgemm_gflops;
  r.mat_share = r.mat_gflops / sgemm_gflops;

  double num = 0, den = 0;
  for (size_t i = 0; i < nq; ++i) {
    const double diff = static_cast<double>(out_fused[i]) - out_mat[i];
    r.max_diff = std::max(r.max_diff, std::fabs(diff));
    num += diff * diff;
    den += static_cast<double>(out_mat[i]) * out_mat[i];
  }
  r.rel_diff = std::sqrt(num / den);

  // float64 on sampled rows: relative error over the sample.
  double fe = 0, me = 0, re = 0;
  for (int64_t h : {int64_t{0}, s.heads - 1})
    for (int64_t row : {int64_t{0}, int64_t{1}, s.len_q / 2, s.len_q - 1}) {
      std::vector<double> ref;
      reference_row(s, q.data(), k.data(), v.data(), h, row, ref);
      const size_t base = static_cast<size_t>((h * s.len_q + row) * s.dim);
      for (size_t d = 0; d < ref.size(); ++d) {
        fe += std::pow(out_fused[base + d] - ref[d], 2);
        me += std::pow(out_mat[base + d] - ref[d], 2);
        re += ref[d] * ref[d];
      }
    }
  r.fused_err64 = std::sqrt(fe / re);
  r.mat_err64 = std::sqrt(me / re);
  return r;
}

double sgemm_rate(int reps, int n) {
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const double seconds = time_median(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  });
  return 2.0 * n * static_cast<double>(n) * n / seconds * 1e-9;
}

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
  return s;
}

std::string mib(double bytes) {
  char buf[64];
  if (bytes < 0) return "n/a";
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  bool quick = false;
  std::string json_path, markdown_path, command;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += ' ';
    command += argv[i];
  }
  CLI::App app("The CPU fused path against a materializing attention on OpenBLAS sgemm",
               "cpu_fused_bench");
  app.add_option("--reps", reps, "timed runs per case [5]")->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "write the results as JSON to FILE");
  app.add_option("--markdown", markdown_path, "write the results as markdown to FILE");
  app.add_flag("--quick", quick, "the small cases only");
  CLI11_PARSE(app, argc, argv);
  for (const std::string& path : {json_path, markdown_path})
    if (!path.empty()) fsdpa::tool::check_writable(path);

  const char* env_core = std::getenv("OPENBLAS_CORETYPE");
  const char* env_l2 = std::getenv("OPENBLAS_L2_SIZE");
  const std::string model = cpu_model();
  const unsigned cores = std::thread::hardware_concurrency();
  const std::string blas_config = trim(openblas_get_config());
  const std::string blas_core = trim(openblas_get_corename());
  const int blas_threads = openblas_get_num_threads();
  std::printf("cpu: %s, %u cores; fsdpa %s\n", model.c_str(), cores, fsdpa::version());
  std::printf("openblas: %s (core %s, %d threads); OPENBLAS_CORETYPE=%s OPENBLAS_L2_SIZE=%s\n",
              blas_config.c_str(), blas_core.c_str(), blas_threads, env_core ? env_core : "unset",
              env_l2 ? env_l2 : "unset");

  const std::string load_before = load_average();
  const double sgemm = sgemm_rate(reps, 2048);
  std::printf("sgemm 2048^3: %.1f GFLOP/s (the ceiling)\n\n", sgemm);

  std::vector<Shape> shapes = {{1, 8, 2048, 2048, 128}, {1, 8, 2048, 16384, 128}};
  if (quick) shapes = {{1, 8, 512, 512, 128}, {1, 8, 512, 4096, 128}};
  std::vector<Result> results;
  for (const Shape& s : shapes) {
    std::fprintf(stderr, "running Lq=%ld Lk=%ld ...\n", static_cast<long>(s.len_q),
                 static_cast<long>(s.len_k));
    results.push_back(run_case(s, reps, sgemm));
  }

  const std::string load_after = load_average();
  std::printf("load average before %s, after %s\n", load_before.c_str(), load_after.c_str());
  std::ostringstream table;
  table << "| B | H | Lq | Lk | D | path | time (ms) | GFLOP/s | share of sgemm | transient "
           "memory | peak RSS growth | rel. error vs f64 (sampled rows) |\n"
        << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  char line[512];
  for (const Result& r : results) {
    const Shape& s = r.shape;
    std::snprintf(line, sizeof line,
                  "| %ld | %ld | %ld | %ld | %ld | fsdpa fused (tile %ldx%ld, %d threads) | "
                  "%.1f | %.1f | %.0f%% | %s (workspace) | %s | %.1e |\n",
                  static_cast<long>(s.batch), static_cast<long>(s.heads),
                  static_cast<long>(s.len_q), static_cast<long>(s.len_k), static_cast<long>(s.dim),
                  static_cast<long>(r.tile_q), static_cast<long>(r.tile_k), r.threads,
                  r.fused_s * 1e3, r.fused_gflops, 100 * r.fused_share, mib(r.fused_bytes).c_str(),
                  mib(r.fused_rss).c_str(), r.fused_err64);
    table << line;
    std::snprintf(line, sizeof line,
                  "| %ld | %ld | %ld | %ld | %ld | materializing (OpenBLAS sgemm) | %.1f | %.1f | "
                  "%.0f%% | %s (scores) | %s | %.1e |\n",
                  static_cast<long>(s.batch), static_cast<long>(s.heads),
                  static_cast<long>(s.len_q), static_cast<long>(s.len_k), static_cast<long>(s.dim),
                  r.mat_s * 1e3, r.mat_gflops, 100 * r.mat_share, mib(r.mat_bytes).c_str(),
                  mib(r.mat_rss).c_str(), r.mat_err64);
    table << line;
  }
  std::ostringstream summary;
  for (const Result& r : results) {
    std::snprintf(line, sizeof line,
                  "- Lk=%ld: fused %.2fx the materializing speed; fused memory = %.3f%% of "
                  "materializing (workspace / scores); max |fused - materializing| = %.2e "
                  "(relative %.2e)\n",
                  static_cast<long>(r.shape.len_k), r.mat_s / r.fused_s,
                  100.0 * r.fused_bytes / r.mat_bytes, r.max_diff, r.rel_diff);
    summary << line;
  }
  std::printf("%s\n%s", table.str().c_str(), summary.str().c_str());

  if (!markdown_path.empty()) {
    std::ofstream md(markdown_path);
    md << "# CPU fused path vs materializing attention (OpenBLAS sgemm)\n\n"
       << "Produced by `bench/cpu_fused_bench.cpp`. f32, BHSD, not causal; FLOPs = "
          "2*B*H*Lq*Lk*(Dqk+Dv); time is the median of "
       << reps << " runs after one warm-up.\n\n"
       << "- Command (from the repository root): `"
       << (env_core || env_l2 ? "" : "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ") << command
       << "`\n"
       << "- Machine: " << model << ", " << cores << " cores\n"
       << "- OpenBLAS: " << blas_config << " (core " << blas_core << ", " << blas_threads
       << " threads); OPENBLAS_CORETYPE " << (env_core ? env_core : "unset")
       << ", OPENBLAS_L2_SIZE " << (env_l2 ? env_l2 : "unset") << "\n"
       << "- Load average (1/5/15 min) before: " << load_before << "; after: " << load_after
       << " (other processes share the 2 cores)\n"
       << "- Ceiling: OpenBLAS sgemm 2048^3 = " << std::fixed;
    md.precision(1);
    md << sgemm << " GFLOP/s, measured in the same run\n\n"
       << table.str() << "\n"
       << summary.str() << "\n"
       << "Transient memory: fused = `plan.workspace_bytes` (per-thread tiles x threads, "
          "independent of Lk); materializing = its Lq x Lk f32 score buffer (one (b, h) at a "
          "time). Peak RSS growth: VmHWM - VmRSS around one call that allocates as a user "
          "would (`fsdpa::attention`; the materializing call allocates its scores), after "
          "resetting the high-water mark.\n";
  }
  if (!json_path.empty()) {
    using fsdpa::tool::finite_or_null;
    fsdpa::tool::Json js;
    js["cpu"] = model;
    js["cores"] = cores;
    js["openblas"] = blas_config;
    js["openblas_core"] = blas_core;
    js["reps"] = reps;
    js["sgemm_2048_gflops"] = finite_or_null(sgemm);
    fsdpa::tool::Json& cases = js["cases"] = fsdpa::tool::Json::array();
    for (const Result& r : results) {
      const Shape& s = r.shape;
      cases.push_back({
          {"batch", s.batch},
          {"heads", s.heads},
          {"len_q", s.len_q},
          {"len_k", s.len_k},
          {"head_dim", s.dim},
          {"dtype", "f32"},
          {"flops", finite_or_null(flops(s))},
          {"fused_ms", finite_or_null(r.fused_s * 1e3)},
          {"fused_gflops", finite_or_null(r.fused_gflops)},
          {"fused_share_of_sgemm", finite_or_null(r.fused_share)},
          {"materializing_ms", finite_or_null(r.mat_s * 1e3)},
          {"materializing_gflops", finite_or_null(r.mat_gflops)},
          {"fused_transient_bytes", finite_or_null(r.fused_bytes)},
          {"materializing_transient_bytes", finite_or_null(r.mat_bytes)},
          {"memory_ratio", finite_or_null(r.fused_bytes / r.mat_bytes)},
          {"fused_peak_rss_growth_bytes", finite_or_null(r.fused_rss)},
          {"materializing_peak_rss_growth_bytes", finite_or_null(r.mat_rss)},
          {"max_abs_diff", finite_or_null(r.max_diff)},
          {"rel_diff", finite_or_null(r.rel_diff)},
          {"fused_rel_err_f64_sampled", finite_or_null(r.fused_err64)},
          {"materializing_rel_err_f64_sampled", finite_or_null(r.mat_err64)},
          {"tile_q", r.tile_q},
          {"tile_k", r.tile_k},
          {"threads", r.threads},
      });
    }
    js["command"] = command;
    fsdpa::tool::write_json_file(json_path, js);
  }
  return 0;
}
