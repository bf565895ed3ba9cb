// The `fsdpa` command.
//
//   fsdpa                 every preset of MODELS.md, prefill and decode, on the best device
//   fsdpa plan ...        what plan() chooses for a shape; plan --matrix: the support matrix
//   fsdpa run ...         one shape: allocate, run, time, check against the reference
//   fsdpa bench ...       a sweep over lengths (and presets), JSON report
//
// Exit status: 0 success, 1 failure (unsupported, error, NaN, error above
// tolerance), 2 bad command line.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "fsdpa/fsdpa.h"
#include "harness.h"
#include "presets.h"
#include "report.h"

namespace fsdpa::tool {
namespace {

constexpr const char* kUsage =
    R"(usage: fsdpa [--device auto|cpu|cuda] [--dtype bf16|f16|f32] [--len N]
             [--decode-len N] [--batch N] [--presets a,b,...] [--pad-rows]
             [--json FILE] [--seed N]
       fsdpa plan SHAPE [--device auto|cpu|cuda] [--arch sm_NN]
       fsdpa plan --matrix
       fsdpa run SHAPE [--device auto|cpu|cuda] [--repeat N] [--check] [--compare]
                 [--seed N] [--json FILE]
       fsdpa bench SHAPE --lens N,N,... [--presets a,b,...] [--device auto|cpu|cuda]
                 [--repeat N] [--seed N] [--json FILE]
       fsdpa --help | --version

With no subcommand, fsdpa runs every preset below, prefill (Lq = Lk = --len)
and decode (Lq = 1, Lk = --decode-len), on the best device, and prints one row
per case: path, kernel, head-dim bucket and pad ratio, time, TFLOP/s or GB/s,
max error against the float64 reference on a sample, workspace, and speed-up
over the unfused path. Defaults: CPU --len 512 --decode-len 4096, CUDA --len
4096 --decode-len 32768; --batch 1, --dtype bf16, all presets.

  plan     prints Plan::explain() for SHAPE; nothing is allocated.
           --matrix prints the support matrix of the selection table.
  run      allocates SHAPE with random inputs, runs it and prints the plan and
           the median time; --check compares with the float64 reference,
           --compare also times the unfused path.
  bench    runs SHAPE at every length of --lens (Lk = N, and Lq = N unless
           --lq is given), or every preset of --presets at those lengths.

SHAPE (defaults in brackets; --preset fills heads, head dims and features):
  --preset NAME                  one of the presets below
  --batch N [1]   --hq N [8]     --hkv N [= hq]   --lq N [1024]   --lk N [= lq]
  --dqk N [128]   --dv N [= dqk]
  --dtype bf16|f16|f32 [bf16]
  --causal [bottom-right|top-left|none]   causal masking [none; bare flag: bottom-right]
  --window N|none                sliding window: keys j >= i + (Lk - Lq) - N stay visible
  --mask none|additive|boolean   a [1, 1, Lq, Lk] array mask with random contents [none]
  --sinks                        per-head attention-sink logits
  --lse                          also write the log-sum-exp
  --mla                          v is a view of the first Dv columns of k (Dv <= Dqk)
  --pad-rows                     rows of q, k, v, out start every 16 bytes (D rounded
                                 up, as fused GPU kernels need) [contiguous rows]
  --scale X                      softmax scale [1/sqrt(Dqk)]
  --softcap C                    logit soft cap: s = C * tanh(s / C) before masks [none;
                                 a preset's own cap, e.g. gemma2-9b's 50]
  --tf32                         allow TF32 tensor cores for f32 on the GPU
  --policy auto|fused|unfused    [FSDPA_POLICY, else auto]
  --device auto|cpu|cuda         auto: CUDA when built, present and working, else CPU

Presets (MODELS.md):
)";

constexpr const char* kUsageTail = R"(
Inputs are random (uniform, mean 0, variance 1) and fresh each run unless
--seed is given; outputs are poisoned with NaN before the first run and checked.
Exit status: 0 success; 1 unsupported shape, library error, NaN left in the
output or error above tolerance; 2 bad command line.
)";

// The synopsis alone (the lines before the first blank line), for errors.
std::string short_usage() {
  const std::string text = kUsage;
  return text.substr(0, text.find("\n\n") + 1) + "Run 'fsdpa --help' for the flags and presets.\n";
}

std::string usage() {
  std::string text = kUsage;
  for (const Preset& p : presets()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-20s %-40s Hq=%lld Hkv=%lld D=%lld/%lld\n", p.name,
                  p.model, static_cast<long long>(p.heads_q), static_cast<long long>(p.heads_kv),
                  static_cast<long long>(p.head_dim_qk), static_cast<long long>(p.head_dim_v));
    text += line;
  }
  return text + kUsageTail;
}

// ------------------------------------------------------------ flags

constexpr FlagSpec kShapeFlags[] = {
    {"--preset", Arity::Value},    {"--batch", Arity::Value},
    {"--hq", Arity::Value},        {"--hkv", Arity::Value},
    {"--lq", Arity::Value},        {"--lk", Arity::Value},
    {"--dqk", Arity::Value},       {"--dv", Arity::Value},
    {"--dtype", Arity::Value},     {"--causal", Arity::OptionalValue},
    {"--window", Arity::Value},    {"--mask", Arity::Value},
    {"--sinks", Arity::Switch},    {"--lse", Arity::Switch},
    {"--mla", Arity::Switch},      {"--scale", Arity::Value},
    {"--tf32", Arity::Switch},     {"--policy", Arity::Value},
    {"--softcap", Arity::Value},   {"--device", Arity::Value},
    {"--pad-rows", Arity::Switch},
};

std::vector<FlagSpec> with_shape_flags(std::initializer_list<FlagSpec> extra) {
  std::vector<FlagSpec> flags(std::begin(kShapeFlags), std::end(kShapeFlags));
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

constexpr std::string_view kDevices[] = {"auto", "cpu", "cuda"};
constexpr std::string_view kDTypes[] = {"bf16", "f16", "f32"};

DType parse_dtype(const std::string& s) {
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  return DType::BF16;
}

const Preset& preset_or_usage_error(const std::string& name) {
  if (const Preset* p = find_preset(name)) return *p;
  std::string known;
  for (const Preset& p : presets()) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw UsageError("unknown preset '" + name + "' (known: " + known + ")");
}

std::vector<const Preset*> presets_from(const Args& args) {
  std::vector<const Preset*> chosen;
  for (const std::string& name : args.list("--presets"))
    chosen.push_back(&preset_or_usage_error(name));
  return chosen;
}

// A case from a preset: heads, head dims, causality, window, sinks, MLA.
CaseSpec case_from_preset(const Preset& p) {
  CaseSpec c;
  c.preset = p.name;
  c.heads_q = p.heads_q;
  c.heads_kv = p.heads_kv;
  c.head_dim_qk = p.head_dim_qk;
  c.head_dim_v = p.head_dim_v;
  c.options.causal = p.causal;
  if (p.window_left >= 0) c.options.window_left = p.window_left;
  c.options.softcap = p.softcap;
  c.sinks = p.sinks;
  c.v_aliases_k = p.v_aliases_k;
  return c;
}

// SHAPE flags on top of a preset (--preset or `preset`) or the defaults.
CaseSpec shape_from_args(const Args& a, const Preset* preset = nullptr) {
  if (!preset && a.value("--preset")) preset = &preset_or_usage_error(*a.value("--preset"));
  CaseSpec c = preset ? case_from_preset(*preset) : CaseSpec{};
  c.kind = "shape";
  c.batch = a.integer("--batch", 1, 0);
  c.heads_q = a.integer("--hq", c.heads_q, 1);
  c.heads_kv = a.integer("--hkv", preset ? c.heads_kv : c.heads_q, 1);
  c.len_q = a.integer("--lq", 1024, 0);
  c.len_k = a.integer("--lk", c.len_q, 0);
  c.head_dim_qk = a.integer("--dqk", c.head_dim_qk, 1);
  c.head_dim_v = a.integer("--dv", preset ? c.head_dim_v : c.head_dim_qk, 1);
  c.dtype = parse_dtype(a.choice("--dtype", "bf16", kDTypes));
  if (a.has("--causal")) {
    constexpr std::string_view kAligns[] = {"bottom-right", "top-left", "none"};
    const std::string align = a.choice("--causal", "bottom-right", kAligns);
    c.options.causal = align != "none";
    c.options.causal_align = align == "top-left" ? CausalAlign::TopLeft : CausalAlign::BottomRight;
  }
  if (std::optional<std::string> w = a.value("--window")) {
    if (*w == "none")
      c.options.window_left.reset();
    else
      c.options.window_left = parse_integer("--window", *w, 0);
  }
  constexpr std::string_view kMasks[] = {"none", "additive", "boolean"};
  const std::string mask = a.choice("--mask", "none", kMasks);
  c.mask = mask == "additive"  ? MaskKind::Additive
           : mask == "boolean" ? MaskKind::Boolean
                               : MaskKind::None;
  c.sinks = c.sinks || a.has("--sinks");
  c.lse = a.has("--lse");
  c.pad_rows = a.has("--pad-rows");
  c.v_aliases_k = c.v_aliases_k || a.has("--mla");
  if (c.v_aliases_k && c.head_dim_v > c.head_dim_qk)
    throw UsageError("--mla needs Dv <= Dqk (v is a view of k), got Dqk=" +
                     std::to_string(c.head_dim_qk) + " Dv=" + std::to_string(c.head_dim_v));
  c.options.scale = a.optional_real("--scale");
  c.options.allow_tf32 = a.has("--tf32");
  if (std::optional<double> cap = a.optional_real("--softcap")) c.options.softcap = *cap;
  constexpr std::string_view kPolicies[] = {"auto", "fused", "unfused"};
  if (a.has("--policy")) {
    const std::string policy = a.choice("--policy", "auto", kPolicies);
    c.options.policy = policy == "fused"     ? Policy::ForceFused
                       : policy == "unfused" ? Policy::Unfused
                                             : Policy::Auto;
  }
  return c;
}

std::string device_flag(const Args& a) { return a.choice("--device", "auto", kDevices); }

uint64_t seed_from(const Args& a) {
  if (std::optional<std::string> text = a.value("--seed"))
    return static_cast<uint64_t>(parse_integer("--seed", *text, 0));
  std::random_device device;
  const auto now =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ((static_cast<uint64_t>(device()) << 32) ^ device() ^ now) & 0x7fffffffffffffffull;
}

uint64_t case_seed(uint64_t seed, size_t index) {
  return seed ^ (0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(index) + 1));
}

std::string seed_text(uint64_t seed) { return std::to_string(seed); }

std::string command_line(int argc, char** argv) {
  std::string s = "fsdpa";
  for (int i = 1; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

// Runs the cases with progress on stderr and the table on stdout; returns
// the exit status (0 when every case is ok).
int run_table(const std::vector<CaseSpec>& specs, const Settings& base, uint64_t seed,
              const ReportHeader& header, const std::optional<std::string>& json_path) {
  if (json_path) check_writable(*json_path);
  ResultTable table;
  table.print_header(std::cout);
  std::cout << std::flush;
  Progress progress(specs.size());
  std::vector<CaseResult> results;
  bool estimated = false;
  size_t ok = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < specs.size(); ++i) {
    progress.start(i, specs[i]);
    Settings settings = base;
    settings.seed = case_seed(seed, i);
    results.push_back(run_case(specs[i], settings));
    progress.finish(results.back());
    table.print_row(std::cout, specs[i], results.back());
    std::cout << std::flush;
    estimated = estimated || results.back().unfused_status == "estimated";
    ok += results.back().ok() ? 1 : 0;
  }
  progress.done();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  table.print_notes(std::cout, estimated);
  std::cout << "\n"
            << specs.size() << " cases, " << ok << " ok, " << specs.size() - ok << " failed; "
            << format_time(seconds * 1e3) << " in all\n";
  if (json_path) {
    write_json(*json_path, header, specs, results);
    std::cout << "wrote " << *json_path << "\n";
  }
  return ok == specs.size() ? 0 : 1;
}

// ------------------------------------------------------------ subcommands

int cmd_default(const std::vector<std::string>& tokens, const std::string& command) {
  static constexpr FlagSpec kFlags[] = {
      {"--device", Arity::Value},     {"--dtype", Arity::Value}, {"--len", Arity::Value},
      {"--decode-len", Arity::Value}, {"--batch", Arity::Value}, {"--presets", Arity::Value},
      {"--json", Arity::Value},       {"--seed", Arity::Value},  {"--pad-rows", Arity::Switch},
  };
  const Args a(tokens, kFlags);
  const std::string requested = device_flag(a);
  const DType dtype = parse_dtype(a.choice("--dtype", "bf16", kDTypes));
  const int64_t batch = a.integer("--batch", 1, 1);
  std::optional<int64_t> len = a.optional_integer("--len", 1);
  std::optional<int64_t> decode_len = a.optional_integer("--decode-len", 1);
  std::vector<const Preset*> chosen = presets_from(a);
  if (chosen.empty())
    for (const Preset& p : presets()) chosen.push_back(&p);
  const uint64_t seed = seed_from(a);

  const DeviceChoice device = choose_device(requested, true);
  const bool cuda = device.device.type == DeviceType::CUDA;
  const int64_t prefill_len = len.value_or(cuda ? 4096 : 512);
  const int64_t kv_len = decode_len.value_or(cuda ? 32768 : 4096);
  const Settings settings = default_settings(device.device.type);

  std::vector<CaseSpec> specs;
  for (const Preset* p : chosen) {
    CaseSpec prefill = case_from_preset(*p);
    prefill.kind = "prefill";
    prefill.batch = batch;
    prefill.len_q = prefill.len_k = prefill_len;
    prefill.dtype = dtype;
    prefill.device = device.device;
    prefill.pad_rows = a.has("--pad-rows");
    CaseSpec decode = prefill;
    decode.kind = "decode";
    decode.len_q = 1;
    decode.len_k = kv_len;
    specs.push_back(prefill);
    specs.push_back(decode);
  }

  std::cout << "fsdpa " << version() << ": the presets of MODELS.md, prefill and decode\n"
            << "device   " << device.name << " -- " << device.reason << "\n"
            << "cases    " << to_string(dtype) << "; prefill B=" << batch
            << " Lq=Lk=" << prefill_len << "; decode B=" << batch << " Lq=1 Lk=" << kv_len
            << "; rows " << (a.has("--pad-rows") ? "padded to 16 bytes" : "contiguous") << "; seed "
            << seed_text(seed) << "\n"
            << "timing   median of >= " << settings.min_runs << " runs after " << settings.warmup
            << " warm-up" << (settings.warmup == 1 ? "" : "s")
            << (cuda ? ", CUDA events, L2 flushed before each run" : ", steady_clock") << "\n\n";
  ReportHeader header{command, device.name, device.reason, seed};
  return run_table(specs, settings, seed, header, a.value("--json"));
}

int cmd_plan(const std::vector<std::string>& tokens) {
  const std::vector<FlagSpec> flags =
      with_shape_flags({{"--matrix", Arity::Switch}, {"--arch", Arity::Value}});
  const Args a(tokens, flags);
  if (a.has("--matrix")) {
    if (tokens.size() > 1) throw UsageError("plan --matrix takes no other flag");
    std::cout << support_matrix();
    return 0;
  }
  CaseSpec c = shape_from_args(a);
  const DeviceChoice device = planning_device(device_flag(a), a.value("--arch"));
  c.device = device.device;
  const Problem problem = describe_case(c);
  std::cout << "target    " << device.name << "\n" << plan(problem, c.options).explain();
  return 0;
}

void print_result(const CaseSpec& c, const CaseResult& r, uint64_t seed) {
  std::cout << r.plan->explain();
  std::cout << "time      " << format_time(r.time_ms) << " (median of " << r.runs << " run"
            << (r.runs == 1 ? "" : "s") << " after " << r.warmup << " warm-up"
            << (r.warmup == 1 ? "" : "s") << ")\n";
  std::cout << "rate      " << format_flops(r.flops / (r.time_ms * 1e-3)) << ", "
            << format_bandwidth(r.kv_bytes / (r.time_ms * 1e-3)) << " of unique K/V\n";
  if (r.status == "nan")
    std::cout << "output    " << r.message << "\n";
  else
    std::cout << "output    every element written (poisoned with NaN before the first run)\n";
  if (r.checked) {
    char line[256];
    std::snprintf(line, sizeof line, "check     max abs error %.3g, relative %.3g (tolerance %.0e)",
                  r.max_abs_err, r.rel_err, r.tolerance);
    std::cout << line;
    if (c.lse) std::cout << ", lse max abs error " << r.lse_max_abs_err;
    std::cout << " on " << r.sample
              << " vs the float64 reference: " << (r.status == "inaccurate" ? "FAIL" : "pass")
              << "\n";
  }
  if (r.unfused_status != "not timed") {
    std::cout << "unfused   ";
    if (std::isfinite(r.unfused_ms))
      std::cout << format_time(r.unfused_ms) << " (" << r.unfused_status
                << (r.unfused_sample == "all" ? "" : " from " + r.unfused_sample) << "), speed-up "
                << format_ratio(r.speedup()) << ", workspace "
                << format_bytes(static_cast<double>(r.unfused_workspace_bytes)) << "\n";
    else
      std::cout << r.unfused_status << "\n";
  }
  std::cout << "seed      " << seed_text(seed) << "\n";
}

int cmd_run(const std::vector<std::string>& tokens, const std::string& command) {
  const std::vector<FlagSpec> flags = with_shape_flags({{"--repeat", Arity::Value},
                                                        {"--check", Arity::Switch},
                                                        {"--compare", Arity::Switch},
                                                        {"--seed", Arity::Value},
                                                        {"--json", Arity::Value}});
  const Args a(tokens, flags);
  CaseSpec c = shape_from_args(a);
  const int64_t repeat = a.integer("--repeat", 0, 1);
  const uint64_t seed = seed_from(a);
  const DeviceChoice device = choose_device(device_flag(a), true);
  c.device = device.device;
  Settings settings = default_settings(c.device.type);
  settings.repeat = static_cast<int>(std::min<int64_t>(repeat, 1000000));
  settings.check = a.has("--check");
  settings.unfused = a.has("--compare");
  settings.seed = seed;
  if (a.value("--json")) check_writable(*a.value("--json"));
  const CaseResult r = run_case(c, settings);
  if (a.value("--json"))
    write_json(*a.value("--json"), ReportHeader{command, device.name, device.reason, seed}, {c},
               {r});
  if (!r.plan || r.status == "error" || r.status == "unsupported") {
    std::cerr << r.message << "\n";
    return 1;
  }
  print_result(c, r, seed);
  if (!r.ok()) {
    std::cerr << "fsdpa: " << r.status << ": " << r.message << "\n";
    return 1;
  }
  return 0;
}

int cmd_bench(const std::vector<std::string>& tokens, const std::string& command) {
  const std::vector<FlagSpec> flags = with_shape_flags({{"--lens", Arity::Value},
                                                        {"--presets", Arity::Value},
                                                        {"--repeat", Arity::Value},
                                                        {"--seed", Arity::Value},
                                                        {"--json", Arity::Value}});
  const Args a(tokens, flags);
  std::vector<int64_t> lens = a.integer_list("--lens", 1);
  const std::vector<const Preset*> chosen = presets_from(a);
  if (!chosen.empty() && a.has("--preset"))
    throw UsageError("give --preset or --presets, not both");
  const int64_t repeat = a.integer("--repeat", 0, 1);
  const uint64_t seed = seed_from(a);
  const CaseSpec base = shape_from_args(a);  // validates the flags once
  if (lens.empty()) lens.push_back(base.len_k);
  const DeviceChoice device = choose_device(device_flag(a), true);

  std::vector<CaseSpec> specs;
  auto add = [&](CaseSpec c) {
    for (int64_t len : lens) {
      c.len_k = len;
      c.len_q = a.has("--lq") ? base.len_q : len;
      c.kind = c.len_q == 1 ? "decode" : c.len_q == c.len_k ? "prefill" : "shape";
      c.device = device.device;
      specs.push_back(c);
    }
  };
  if (chosen.empty())
    add(base);
  else
    for (const Preset* p : chosen) add(shape_from_args(a, p));

  Settings settings = default_settings(device.device.type);
  settings.repeat = static_cast<int>(std::min<int64_t>(repeat, 1000000));
  std::cout << "fsdpa " << version() << " bench\n"
            << "device   " << device.name << " -- " << device.reason << "\n"
            << "seed     " << seed_text(seed) << "\n\n";
  return run_table(specs, settings, seed, ReportHeader{command, device.name, device.reason, seed},
                   a.value("--json"));
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> tokens(argv + 1, argv + argc);
  for (const std::string& t : tokens)
    if (t == "--help" || t == "-h") {
      std::cout << usage();
      return 0;
    }
  if (!tokens.empty() && tokens[0] == "help") {
    std::cout << usage();
    return 0;
  }
  if (!tokens.empty() && tokens[0] == "--version") {
    if (tokens.size() > 1) throw UsageError("--version takes no other flag");
    std::cout << "fsdpa " << version() << "\n";
    return 0;
  }
  const std::string command = command_line(argc, argv);
  if (tokens.empty() || tokens[0].rfind("-", 0) == 0) return cmd_default(tokens, command);
  const std::string sub = tokens[0];
  const std::vector<std::string> rest(tokens.begin() + 1, tokens.end());
  if (sub == "plan") return cmd_plan(rest);
  if (sub == "run") return cmd_run(rest, command);
  if (sub == "bench") return cmd_bench(rest, command);
  throw UsageError("unknown subcommand '" + sub + "'");
}

}  // namespace
}  // namespace fsdpa::tool

int main(int argc, char** argv) {
  try {
    return fsdpa::tool::dispatch(argc, argv);
  } catch (const fsdpa::tool::UsageError& e) {
    std::cerr << "fsdpa: " << e.what() << "\n\n" << fsdpa::tool::short_usage();
    return 2;
  } catch (const fsdpa::Error& e) {
    std::cerr << e.what() << "\n";  // library messages start with "fsdpa: "
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "fsdpa: " << e.what() << "\n";
    return 1;
  }
}
