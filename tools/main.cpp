// The `fsdpa` command.
//
//   fsdpa                 every model preset (docs/design.md), prefill and decode
//   fsdpa plan ...        what plan() chooses for a shape; plan --matrix: the support matrix
//   fsdpa run ...         one shape: allocate, run, time, check against the reference
//   fsdpa bench ...       a sweep over lengths (and presets), JSON report
//
// Exit status: 0 success, 1 failure (unsupported, error, NaN, error above
// tolerance), 2 bad command line.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "fsdpa/fsdpa.h"
#include "harness.h"
#if defined(FSDPA_PREFILL_TRACE)
#include "phase_trace.h"
#endif
#include "presets.h"
#include "report.h"
#include "select/table.h"
#include "usage_error.h"

namespace fsdpa::tool {
namespace {

constexpr const char* kDescription =
    R"(fsdpa: fused scaled-dot-product attention for every head dimension.

With no subcommand, fsdpa runs every preset below, prefill (Lq = Lk = --len)
and decode (Lq = 1, Lk = --decode-len), on the best device, and prints one row
per case: path, kernel, head-dim bucket and pad ratio, time, TFLOP/s or GB/s,
max error against the float64 reference on a sample, workspace, and speed-up
over the unfused path. Defaults: CPU --len 512 --decode-len 4096, CUDA --len
4096 --decode-len 32768; --batch 1, --dtype bf16, all presets. 'fsdpa
SUBCOMMAND --help' lists a subcommand's flags.)";

constexpr const char* kTail = R"(
Inputs are random (uniform, mean 0, variance 1) and fresh each run unless
--seed is given; outputs are poisoned with NaN before the first run and checked.
Exit status: 0 success; 1 unsupported shape, library error, NaN left in the
output or error above tolerance; 2 bad command line.)";

// The presets (docs/design.md's model shapes), for the help footers.
std::string presets_text() {
  std::string text = "\nPresets (--preset, --presets):\n";
  for (const Preset& p : presets())
    text += fmt::format("  {:<20} {:<40} Hq={} Hkv={} D={}/{}\n", p.name, p.model, p.heads_q,
                        p.heads_kv, p.head_dim_qk, p.head_dim_v);
  return text + kTail;
}

constexpr const char* kHelpHint =
    "Run 'fsdpa --help' or 'fsdpa SUBCOMMAND --help' for the flags.\n";

// ------------------------------------------------------------ flags

const std::vector<std::string> kDevices = {"auto", "cpu", "cuda"};
const std::vector<std::string> kDTypes = {"bf16", "f16", "f32"};

// The selection table's row names (run --row), of every backend built.
std::vector<std::string> row_names() {
  std::vector<std::string> names;
  for (const detail::KernelRow& row : detail::selection_table()) names.emplace_back(row.name);
  return names;
}

// Integers from `min`; CLI11 names the flag, the value and the range.
CLI::Range at_least(int64_t min) { return CLI::Range(min, std::numeric_limits<int64_t>::max()); }

CLI::Validator preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.emplace_back(p.name);
  return CLI::IsMember(names);
}

// The SHAPE flags of plan, run and bench. A value is used only when its flag
// was given (given()), so presets and defaults fill the rest.
struct ShapeFlags {
  std::string preset, dtype = "bf16", causal, window, mask = "none", policy, device = "auto";
  int64_t batch = 1, hq = 0, hkv = 0, lq = 1024, lk = 0, dqk = 0, dv = 0, page_size = 0;
  std::vector<int64_t> seq_lens;
  double scale = 0.0, softcap = 0.0;
  bool sinks = false, lse = false, mla = false, pad_rows = false, tf32 = false;
  CLI::App* app = nullptr;

  bool given(const std::string& flag) const { return app->count(flag) > 0; }
};

void add_shape_flags(CLI::App& app, ShapeFlags& f) {
  f.app = &app;
  app.add_option("--preset", f.preset, "one of the presets below: heads, head dims, features")
      ->check(preset_names());
  app.add_option("--batch", f.batch, "batch [1]")->check(at_least(0));
  app.add_option("--hq", f.hq, "query heads [8, or the preset's]")->check(at_least(1));
  app.add_option("--hkv", f.hkv, "key/value heads [= hq, or the preset's]")->check(at_least(1));
  app.add_option("--lq", f.lq, "queries [1024]")->check(at_least(0));
  app.add_option("--lk", f.lk, "keys [= lq]")->check(at_least(0));
  app.add_option("--dqk", f.dqk, "q/k head dim [128, or the preset's]")->check(at_least(1));
  app.add_option("--dv", f.dv, "v head dim [= dqk, or the preset's]")->check(at_least(1));
  app.add_option("--dtype", f.dtype, "[bf16]")->check(CLI::IsMember(kDTypes));
  app.add_option("--causal", f.causal, "causal masking [none; the bare flag: bottom-right]")
      ->expected(0, 1)
      ->check(CLI::IsMember({"bottom-right", "top-left", "none"}));
  app.add_option("--window", f.window,
                 "N|none: sliding window, keys j >= i + (Lk - Lq) - N stay visible")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            if (value == "none") return "";
            int64_t n = 0;
            const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
            if (error != std::errc() || end != value.data() + value.size() || n < 0)
              return "expected an integer >= 0 or 'none', got '" + value + "'";
            return "";
          },
          "N|none"));
  app.add_option("--mask", f.mask, "a [1, 1, Lq, Lk] mask with random contents [none]")
      ->check(CLI::IsMember({"none", "additive", "boolean"}));
  app.add_flag("--sinks", f.sinks, "per-head attention-sink logits")->disable_flag_override();
  app.add_flag("--lse", f.lse, "also write the log-sum-exp")->disable_flag_override();
  app.add_flag("--mla", f.mla, "v is a view of the first Dv columns of k (Dv <= Dqk)")
      ->disable_flag_override();
  app.add_flag("--pad-rows", f.pad_rows,
               "rows of q, k, v, out start every 16 bytes (D rounded up) [contiguous rows]")
      ->disable_flag_override();
  app.add_option("--page-size", f.page_size,
                 "a paged KV cache of pages of N keys, in a shuffled block table [dense]")
      ->check(at_least(1));
  app.add_option("--seq-lens", f.seq_lens,
                 "N,N,...: keys of each sequence, one per batch entry, each <= Lk (a ragged "
                 "batch) [Lk each]")
      ->delimiter(',')
      ->check(at_least(0));
  app.add_option("--scale", f.scale, "softmax scale [1/sqrt(Dqk)]")->check(CLI::Number);
  app.add_option("--softcap", f.softcap,
                 "logit soft cap: s = C * tanh(s / C) before masks [none; a preset's own]")
      ->check(CLI::Number);
  app.add_flag("--tf32", f.tf32, "allow TF32 tensor cores for f32 on the GPU")
      ->disable_flag_override();
  app.add_option("--policy", f.policy, "[FSDPA_POLICY, else auto]")
      ->check(CLI::IsMember({"auto", "fused", "unfused"}));
  app.add_option("--device", f.device, "auto: CUDA when built, present and working, else CPU")
      ->check(CLI::IsMember(kDevices));
}

DType parse_dtype(const std::string& s) {
  if (s == "f16") return DType::F16;
  if (s == "f32") return DType::F32;
  return DType::BF16;
}

std::vector<const Preset*> presets_from(const std::vector<std::string>& names) {
  std::vector<const Preset*> chosen;
  for (const std::string& name : names) chosen.push_back(find_preset(name));
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
CaseSpec shape_from_flags(const ShapeFlags& f, const Preset* preset = nullptr) {
  if (!preset && f.given("--preset")) preset = find_preset(f.preset);
  CaseSpec c = preset ? case_from_preset(*preset) : CaseSpec{};
  c.kind = "shape";
  c.batch = f.batch;
  if (f.given("--hq")) c.heads_q = f.hq;
  c.heads_kv = f.given("--hkv") ? f.hkv : preset ? c.heads_kv : c.heads_q;
  c.len_q = f.lq;
  c.len_k = f.given("--lk") ? f.lk : c.len_q;
  if (f.given("--dqk")) c.head_dim_qk = f.dqk;
  c.head_dim_v = f.given("--dv") ? f.dv : preset ? c.head_dim_v : c.head_dim_qk;
  c.dtype = parse_dtype(f.dtype);
  if (f.given("--causal")) {
    const std::string align = f.causal.empty() ? "bottom-right" : f.causal;
    c.options.causal = align != "none";
    c.options.causal_align = align == "top-left" ? CausalAlign::TopLeft : CausalAlign::BottomRight;
  }
  if (f.given("--window")) {
    if (f.window == "none")
      c.options.window_left.reset();
    else
      c.options.window_left = std::stoll(f.window);
  }
  c.mask = f.mask == "additive"  ? MaskKind::Additive
           : f.mask == "boolean" ? MaskKind::Boolean
                                 : MaskKind::None;
  c.sinks = c.sinks || f.sinks;
  c.lse = f.lse;
  c.pad_rows = f.pad_rows;
  c.v_aliases_k = c.v_aliases_k || f.mla;
  if (c.v_aliases_k && c.head_dim_v > c.head_dim_qk)
    throw UsageError(fmt::format("--mla needs Dv <= Dqk (v is a view of k), got Dqk={} Dv={}",
                                 c.head_dim_qk, c.head_dim_v));
  if (f.given("--page-size")) c.page_size = f.page_size;
  if (f.given("--seq-lens")) {
    if (static_cast<int64_t>(f.seq_lens.size()) != c.batch)
      throw UsageError(
          fmt::format("--seq-lens gives {} lengths for --batch {}", f.seq_lens.size(), c.batch));
    for (int64_t len : f.seq_lens)
      if (len > c.key_capacity())
        throw UsageError(
            fmt::format("--seq-lens: {} exceeds the key capacity Lk={}", len, c.key_capacity()));
    c.seq_lens = f.seq_lens;
  }
  if (f.given("--scale")) c.options.scale = f.scale;
  c.options.allow_tf32 = f.tf32;
  if (f.given("--softcap")) c.options.softcap = f.softcap;
  if (f.given("--policy"))
    c.options.policy = f.policy == "fused"     ? Policy::ForceFused
                       : f.policy == "unfused" ? Policy::Unfused
                                               : Policy::Auto;
  return c;
}

// --seed: given, or fresh from the clock and the random device.
uint64_t seed_from(const CLI::App& app, int64_t given) {
  if (app.count("--seed") > 0) return static_cast<uint64_t>(given);
  std::random_device device;
  const auto now =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return ((static_cast<uint64_t>(device()) << 32) ^ device() ^ now) & 0x7fffffffffffffffull;
}

uint64_t case_seed(uint64_t seed, size_t index) {
  return seed ^ (0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(index) + 1));
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

struct DefaultFlags {
  std::string device = "auto", dtype = "bf16", json;
  int64_t len = 0, decode_len = 0, batch = 1, seed = 0;
  std::vector<std::string> presets;
  bool pad_rows = false;
};

void add_default_flags(CLI::App& app, DefaultFlags& f) {
  app.add_option("--device", f.device, "auto: CUDA when built, present and working, else CPU")
      ->check(CLI::IsMember(kDevices));
  app.add_option("--dtype", f.dtype, "[bf16]")->check(CLI::IsMember(kDTypes));
  app.add_option("--len", f.len, "prefill Lq = Lk [CPU 512, CUDA 4096]")->check(at_least(1));
  app.add_option("--decode-len", f.decode_len, "decode Lk [CPU 4096, CUDA 32768]")
      ->check(at_least(1));
  app.add_option("--batch", f.batch, "[1]")->check(at_least(1));
  app.add_option("--presets", f.presets, "a,b,...: these presets only [all]")
      ->delimiter(',')
      ->check(preset_names());
  app.add_option("--json", f.json, "also write the results as JSON to FILE");
  app.add_option("--seed", f.seed, "inputs from this seed [fresh]")->check(at_least(0));
  app.add_flag("--pad-rows", f.pad_rows, "rows padded to 16 bytes [contiguous]")
      ->disable_flag_override();
}

int cmd_default(const CLI::App& app, const DefaultFlags& f, const std::string& command) {
  const DType dtype = parse_dtype(f.dtype);
  std::vector<const Preset*> chosen = presets_from(f.presets);
  if (chosen.empty())
    for (const Preset& p : presets()) chosen.push_back(&p);
  const uint64_t seed = seed_from(app, f.seed);
  if (!f.json.empty()) check_writable(f.json);

  const DeviceChoice device = choose_device(f.device, true);
  const bool cuda = device.device.type == DeviceType::CUDA;
  const int64_t prefill_len = app.count("--len") ? f.len : cuda ? 4096 : 512;
  const int64_t kv_len = app.count("--decode-len") ? f.decode_len : cuda ? 32768 : 4096;
  const Settings settings = default_settings(device.device.type);

  std::vector<CaseSpec> specs;
  for (const Preset* p : chosen) {
    CaseSpec prefill = case_from_preset(*p);
    prefill.kind = "prefill";
    prefill.batch = f.batch;
    prefill.len_q = prefill.len_k = prefill_len;
    prefill.dtype = dtype;
    prefill.device = device.device;
    prefill.pad_rows = f.pad_rows;
    CaseSpec decode = prefill;
    decode.kind = "decode";
    decode.len_q = 1;
    decode.len_k = kv_len;
    specs.push_back(prefill);
    specs.push_back(decode);
  }

  std::cout << fmt::format(
      "fsdpa {}: the model presets, prefill and decode\n"
      "device   {} -- {}\n"
      "cases    {}; prefill B={} Lq=Lk={}; decode B={} Lq=1 Lk={}; rows {}; seed {}\n"
      "timing   median of >= {} runs after {} warm-up{}{}\n\n",
      version(), device.name, device.reason, to_string(dtype), f.batch, prefill_len, f.batch,
      kv_len, f.pad_rows ? "padded to 16 bytes" : "contiguous", seed, settings.min_runs,
      settings.warmup, settings.warmup == 1 ? "" : "s",
      cuda ? ", CUDA events, L2 flushed before each run" : ", steady_clock");
  ReportHeader header{command, device.name, device.reason, seed};
  return run_table(specs, settings, seed, header,
                   f.json.empty() ? std::nullopt : std::optional<std::string>(f.json));
}

struct PlanFlags {
  ShapeFlags shape;
  bool matrix = false;
  std::string arch;
};

int cmd_plan(const CLI::App& app, const PlanFlags& f) {
  if (f.matrix) {
    for (const CLI::Option* option : app.get_options())
      if (option->count() > 0 && option->get_name() != "--matrix")
        throw UsageError("plan --matrix takes no other flag, got " + option->get_name());
    std::cout << support_matrix();
    return 0;
  }
  CaseSpec c = shape_from_flags(f.shape);
  const DeviceChoice device = planning_device(
      f.shape.device, app.count("--arch") ? std::optional<std::string>(f.arch) : std::nullopt);
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
    std::cout << fmt::format("check     max abs error {:.3g}, relative {:.3g} (tolerance {:.0e})",
                             r.max_abs_err, r.rel_err, r.tolerance);
    if (c.lse) std::cout << ", lse max abs error " << r.lse_max_abs_err;
    std::cout << " on " << r.sample
              << " vs the float64 reference: " << (r.status == "inaccurate" ? "FAIL" : "pass")
              << "\n";
  }
  if (r.unfused_status != "not timed") {
    std::cout << "unfused   ";
    if (std::isfinite(r.unfused_ms))
      std::cout << format_time(r.unfused_ms) << " (" << r.unfused_baseline << ", "
                << r.unfused_status
                << (r.unfused_sample == "all" ? "" : " from " + r.unfused_sample) << "), speed-up "
                << format_ratio(r.speedup()) << ", workspace "
                << format_bytes(static_cast<double>(r.unfused_workspace_bytes)) << "\n";
    else
      std::cout << r.unfused_status << "\n";
  }
  std::cout << "seed      " << seed << "\n";
}

struct RunFlags {
  ShapeFlags shape;
  int64_t repeat = 0, seed = 0;
  bool check = false, compare = false;
  std::string json;
  std::string row;
  std::string trace;  // FSDPA_PREFILL_TRACE builds: --trace FILE
};

int cmd_run(const CLI::App& app, const RunFlags& f, const std::string& command) {
  CaseSpec c = shape_from_flags(f.shape);
  c.row = f.row;
  const uint64_t seed = seed_from(app, f.seed);
  if (!f.json.empty()) check_writable(f.json);
  const DeviceChoice device = choose_device(f.shape.device, true);
  c.device = device.device;
  Settings settings = default_settings(c.device.type);
  settings.repeat = static_cast<int>(std::min<int64_t>(f.repeat, 1000000));
  settings.check = f.check;
  settings.unfused = f.compare;
  settings.seed = seed;
#if defined(FSDPA_PREFILL_TRACE)
  std::optional<PhaseTrace> trace;
  if (!f.trace.empty()) trace.emplace();
#endif
  const CaseResult r = run_case(c, settings);
#if defined(FSDPA_PREFILL_TRACE)
  if (trace && r.plan) trace->report(f.trace, std::cout);
#endif
  if (!f.json.empty())
    write_json(f.json, ReportHeader{command, device.name, device.reason, seed}, {c}, {r});
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

struct BenchFlags {
  ShapeFlags shape;
  std::vector<int64_t> lens;
  std::vector<std::string> presets;
  int64_t repeat = 0, seed = 0;
  std::string json;
};

int cmd_bench(const CLI::App& app, const BenchFlags& f, const std::string& command) {
  std::vector<int64_t> lens = f.lens;
  const std::vector<const Preset*> chosen = presets_from(f.presets);
  if (!chosen.empty() && f.shape.given("--preset"))
    throw UsageError("give --preset or --presets, not both");
  const uint64_t seed = seed_from(app, f.seed);
  const CaseSpec base = shape_from_flags(f.shape);  // validates the flags once
  if (lens.empty()) lens.push_back(base.len_k);
  if (!f.json.empty()) check_writable(f.json);
  const DeviceChoice device = choose_device(f.shape.device, true);

  std::vector<CaseSpec> specs;
  auto add = [&](CaseSpec c) {
    for (int64_t len : lens) {
      c.len_k = len;
      c.len_q = f.shape.given("--lq") ? base.len_q : len;
      c.kind = c.len_q == 1 ? "decode" : c.len_q == c.len_k ? "prefill" : "shape";
      c.device = device.device;
      specs.push_back(c);
    }
  };
  if (chosen.empty())
    add(base);
  else
    for (const Preset* p : chosen) add(shape_from_flags(f.shape, p));

  Settings settings = default_settings(device.device.type);
  settings.repeat = static_cast<int>(std::min<int64_t>(f.repeat, 1000000));
  std::cout << fmt::format("fsdpa {} bench\ndevice   {} -- {}\nseed     {}\n\n", version(),
                           device.name, device.reason, seed);
  return run_table(specs, settings, seed, ReportHeader{command, device.name, device.reason, seed},
                   f.json.empty() ? std::nullopt : std::optional<std::string>(f.json));
}

std::string command_line(int argc, char** argv) {
  std::string s = "fsdpa";
  for (int i = 1; i < argc; ++i) s += std::string(" ") + argv[i];
  return s;
}

// The command line through CLI11: the default run's flags on the app, one
// subcommand each for plan, run and bench with the SHAPE flags. Help and
// --version print and return 0; a bad command line is a UsageError.
int dispatch(int argc, char** argv) {
  CLI::App app(kDescription, "fsdpa");
  app.footer(presets_text());
  app.set_version_flag("--version", std::string("fsdpa ") + version());
  app.require_subcommand(0, 1);
  DefaultFlags defaults;
  add_default_flags(app, defaults);

  PlanFlags plan_flags;
  CLI::App* plan_app = app.add_subcommand(
      "plan", "prints Plan::explain() for SHAPE (nothing is allocated), or the support matrix");
  add_shape_flags(*plan_app, plan_flags.shape);
  plan_app->add_flag("--matrix", plan_flags.matrix, "the support matrix of the selection table")
      ->disable_flag_override();
  plan_app->add_option("--arch", plan_flags.arch,
                       fmt::format("with --device cuda: the architecture to plan for (without a "
                                   "GPU: {})",
                                   offline_arch_list()));
  plan_app->footer(presets_text());

  RunFlags run_flags;
  CLI::App* run_app = app.add_subcommand(
      "run", "runs SHAPE on random inputs and prints the plan and the median time");
  add_shape_flags(*run_app, run_flags.shape);
  run_app->add_option("--repeat", run_flags.repeat, "at least this many timed runs")
      ->check(at_least(1));
  run_app->add_flag("--check", run_flags.check, "compare with the float64 reference")
      ->disable_flag_override();
  run_app->add_flag("--compare", run_flags.compare, "also time the unfused path")
      ->disable_flag_override();
  run_app->add_option("--seed", run_flags.seed, "inputs from this seed [fresh]")
      ->check(at_least(0));
  run_app->add_option("--json", run_flags.json, "also write the result as JSON to FILE");
  run_app
      ->add_option("--row", run_flags.row,
                   "plan on this row of the selection table (`fsdpa plan --matrix` lists "
                   "them) instead of plan()'s choice: an A/B of the rows that serve a shape")
      ->check(CLI::IsMember(row_names()));
#if defined(FSDPA_PREFILL_TRACE)
  run_app->add_option("--trace", run_flags.trace,
                      "write the wgmma prefill kernel's phase stamps of the last launch to FILE "
                      "(CSV) and print each phase's cycles a key tile");
#endif
  run_app->footer(presets_text());

  BenchFlags bench_flags;
  CLI::App* bench_app = app.add_subcommand(
      "bench",
      "runs SHAPE at every length of --lens (Lk = N, and Lq = N unless --lq is given), "
      "or every preset of --presets at those lengths");
  add_shape_flags(*bench_app, bench_flags.shape);
  bench_app->add_option("--lens", bench_flags.lens, "N,N,...: the lengths [--lk]")
      ->delimiter(',')
      ->check(at_least(1));
  bench_app->add_option("--presets", bench_flags.presets, "a,b,...: these presets")
      ->delimiter(',')
      ->check(preset_names());
  bench_app->add_option("--repeat", bench_flags.repeat, "at least this many timed runs")
      ->check(at_least(1));
  bench_app->add_option("--seed", bench_flags.seed, "inputs from this seed [fresh]")
      ->check(at_least(0));
  bench_app->add_option("--json", bench_flags.json, "also write the results as JSON to FILE");
  bench_app->footer(presets_text());

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();  // the help of the subcommand given, if any
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::cout << app.version() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  const std::string command = command_line(argc, argv);
  CLI::App* chosen = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
  if (chosen != nullptr)
    for (const CLI::Option* option : app.get_options())
      if (option->count() > 0)
        throw UsageError(option->get_name() + " belongs to the default run, not to '" +
                         chosen->get_name() + "' (give it after the subcommand, if it has it)");
  if (chosen == plan_app) return cmd_plan(*plan_app, plan_flags);
  if (chosen == run_app) return cmd_run(*run_app, run_flags, command);
  if (chosen == bench_app) return cmd_bench(*bench_app, bench_flags, command);
  return cmd_default(app, defaults, command);
}

}  // namespace
}  // namespace fsdpa::tool

int main(int argc, char** argv) {
  try {
    return fsdpa::tool::dispatch(argc, argv);
  } catch (const fsdpa::tool::UsageError& e) {
    std::cerr << "fsdpa: " << e.what() << "\n" << fsdpa::tool::kHelpHint;
    return 2;
  } catch (const fsdpa::Error& e) {
    std::cerr << e.what() << "\n";  // library messages start with "fsdpa: "
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "fsdpa: " << e.what() << "\n";
    return 1;
  }
}
