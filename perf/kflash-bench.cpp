// kflash-bench: every kflash kernel on every enabled backend, against the machine's own limits
// (memory bandwidth, GEMM throughput) and against the baselines users would otherwise run, all
// measured in the same run. See README "Benchmarks" and `kflash-bench --help`.
#include "bench_cases.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace kflash_bench {
namespace {

struct Options {
  std::string backend;  // empty: all
  std::string filter;   // regex over benchmark names; empty: all
  bool full = false;
  std::string out;
  std::vector<std::string> compare;
  std::string check_json;
  bool check_limits = false;
};

const char* usage =
    "usage: kflash-bench [--backend NAME] [--filter REGEX] [--full] [--out DIR]\n"
    "       kflash-bench --compare A.json B.json\n"
    "       kflash-bench --check-limits [--backend NAME]\n"
    "       kflash-bench --check-json DIR/results.json\n"
    "  --backend NAME   Serial, OpenMP or Cuda (default: every enabled backend)\n"
    "  --filter REGEX   kernels/shapes to run, matched against names such as\n"
    "                   'OpenMP/softmax/fp32/4096x1024/kflash' (limits always run)\n"
    "  --full           the whole grid instead of the default selection (~2 min on 2 cores)\n"
    "  --out DIR        write DIR/results.json (Google Benchmark JSON) and DIR/summary.png\n"
    "  --compare A B    ratio between two results.json files, kernel by kernel\n"
    "  --check-limits   measure the limits only: exit 1 unless each is positive and finite; print\n"
    "                   whether they are plausible (a busy machine may make them not)\n"
    "  --check-json F   check that a results.json is well formed (limits and times positive)\n"
    "  Kokkos options (--kokkos-threads=N, ...) are passed to Kokkos.\n";

struct Registry {
  Options opt;
  std::vector<std::pair<std::string, std::function<void(benchmark::State&)>>> entries;

  void add(const std::string& name, std::function<void(benchmark::State&)> f, bool always = false) {
    if (!always && !opt.filter.empty() && !std::regex_search(name, std::regex(opt.filter))) return;
    entries.emplace_back(name, std::move(f));
  }
};

template <class Exec>
void register_backend(Registry& reg) {
  const std::string be = Exec::name();
  if (!reg.opt.backend.empty() && reg.opt.backend != be) return;
  const bool host = kflash::impl::ScheduleTraits<Exec>::is_host;
  const int threads = Exec().concurrency();

  const char* bw[] = {"read_bw", "copy_bw", "triad_bw"};
  for (int kind = 0; kind < 3; ++kind)
    reg.add(be + "/limits/" + bw[kind], [=](benchmark::State& s) { limit_bandwidth<Exec>(s, be, kind); }, true);
  if (!host) {
    reg.add(be + "/limits/fma_fp32", [=](benchmark::State& s) { limit_fma<Exec, float>(s, be); }, true);
    reg.add(be + "/limits/fma_fp64", [=](benchmark::State& s) { limit_fma<Exec, double>(s, be); }, true);
  }
#if KFLASH_BENCH_HAS_HOST_PEAK
  if (host) {
    reg.add(be + "/limits/fma_fp32", [=](benchmark::State& s) { limit_host_peak<Exec>(s, be, 4); }, true);
    reg.add(be + "/limits/fma_fp64", [=](benchmark::State& s) { limit_host_peak<Exec>(s, be, 8); }, true);
    if (has_bf16_dot())
      reg.add(
          be + "/limits/bf16_dot", [=](benchmark::State& s) { limit_host_peak<Exec>(s, be, 2, HostPeak::bf16_dot); },
          true);
    if (has_amx())
      reg.add(
          be + "/limits/amx_bf16", [=](benchmark::State& s) { limit_host_peak<Exec>(s, be, 2, HostPeak::amx_bf16); },
          true);
  }
#endif
#if KFLASH_BENCH_HAS_CBLAS
  if (host) {
    reg.add(be + "/limits/sgemm_2048", [=](benchmark::State& s) { limit_gemm<float>(s, be, threads); }, true);
    reg.add(be + "/limits/dgemm_2048", [=](benchmark::State& s) { limit_gemm<double>(s, be, threads); }, true);
    if (reg.opt.check_limits)
      reg.add(be + "/limits/sgemm_512", [=](benchmark::State& s) { limit_gemm<float>(s, be, threads, 512); }, true);
  }
#endif

  // softmax family
  using Shape = std::pair<index_t, index_t>;
  // 32768x1000: a classifier's rows, whose length is no multiple of a vector; 1048576x8: a
  // mixture-of-experts router's (a token's scores over 8 experts), shorter than a vector.
  const std::vector<Shape> full_shapes = {{4096, 1024}, {1024, 32768}, {64, 1048576}, {1, 67108864},
                                          {65536, 64},  {32768, 1000}, {1048576, 8}};
  const std::vector<Shape> default_shapes = {{4096, 1024}, {1, 16777216}, {65536, 64}};
  auto add_rows = [&](auto type_tag, RowKind kind, Shape sh) {
    using T = decltype(type_tag);
    const std::string base = be + "/" + row_kind_name(kind) + "/" + type_name<T>() + "/" +
                             std::to_string(sh.first) + "x" + std::to_string(sh.second);
    for (int variant : {3, 2, 0, stream_variant}) {
#if KFLASH_BENCH_HAS_ONEDNN
      // oneDNN's softmax and log_softmax, fp32 and bf16 (oneDNN 2.x has no fp16 on CPUs).
      if (variant == 3 && host && kind != RowKind::logsumexp && onednn_has<T>)
        reg.add(base + "/baseline_onednn",
                [=](benchmark::State& s) { row_case<Exec, T>(s, be, kind, sh.first, sh.second, onednn_variant); });
#endif
      if (kflash::impl::is_half_type<T> && variant != 0) continue;  // other baselines: fp32 and fp64
      // The baselines run a team per row: on a device, a few long rows leave it nearly idle for
      // seconds per call, so they are measured from 1024 rows up only.
      if (variant != 0 && variant != stream_variant && !host && sh.first < 1024) continue;
      // The stream: rows wider than its tile, softmax and log_softmax.
      if (variant == stream_variant && (kind == RowKind::logsumexp || sh.second <= stream_tile)) continue;
      reg.add(base + (variant == 3   ? "/baseline_3pass"
                      : variant == 2 ? "/baseline_2pass"
                      : variant == 0 ? "/kflash"
                                     : "/kflash_stream" + std::to_string(stream_tile)),
              [=](benchmark::State& s) { row_case<Exec, T>(s, be, kind, sh.first, sh.second, variant); });
    }
  };
  for (RowKind kind : {RowKind::softmax, RowKind::log_softmax, RowKind::logsumexp}) {
    if (reg.opt.full) {
      for (const Shape& sh : full_shapes) {
        add_rows(float(), kind, sh);
        add_rows(double(), kind, sh);
        add_rows(kflash::bhalf_t(), kind, sh);
        add_rows(kflash::half_t(), kind, sh);
      }
    } else if (kind != RowKind::log_softmax) {
      for (const Shape& sh : default_shapes) add_rows(float(), kind, sh);
    }
  }

  // cross-entropy: LLM vocabularies (32k to 256k) at training batches, and short rows
  const std::vector<Shape> ce_shapes = reg.opt.full ? std::vector<Shape>{{512, 262144}, {4096, 32768}, {8, 262144}, {65536, 64}}
                                                    : std::vector<Shape>{{256, 131072}, {8, 262144}};
  for (const Shape& sh : ce_shapes) {
    const auto add_ce = [&](auto type_tag) {
      using T = decltype(type_tag);
      const std::string base = be + "/cross_entropy/" + type_name<T>() + "/" + std::to_string(sh.first) + "x" +
                               std::to_string(sh.second);
      if (!kflash::impl::is_half_type<T>)  // 16-bit logits: kflash's call only
        reg.add(base + "/baseline_log_softmax",
                [=](benchmark::State& s) { cross_entropy_case<Exec, T>(s, be, sh.first, sh.second, 1); });
      reg.add(base + "/kflash",
              [=](benchmark::State& s) { cross_entropy_case<Exec, T>(s, be, sh.first, sh.second, 0); });
      if (reg.opt.full)
        reg.add(base + "/kflash_without_smoothing",
                [=](benchmark::State& s) { cross_entropy_case<Exec, T>(s, be, sh.first, sh.second, 2); });
    };
    add_ce(float());
    if (reg.opt.full) add_ce(kflash::bhalf_t());
  }

  // gradients: the row operations at the forward's shapes (the baselines from 1024 rows up on a
  // device, as the forward's), cross-entropy in place at its shapes
  for (RowKind kind : {RowKind::softmax, RowKind::log_softmax, RowKind::logsumexp}) {
    if (!reg.opt.full && kind != RowKind::softmax) continue;
    for (const Shape& sh : reg.opt.full ? full_shapes : std::vector<Shape>{{4096, 1024}}) {
      const auto add_grad = [&](auto type_tag) {
        using T = decltype(type_tag);
        const std::string base = be + "/" + row_kind_name(kind) + "_backward/" + type_name<T>() + "/" +
                                 std::to_string(sh.first) + "x" + std::to_string(sh.second);
        if (kind != RowKind::logsumexp && (host || sh.first >= 1024) && !kflash::impl::is_half_type<T>)
          reg.add(base + "/baseline_2pass",
                  [=](benchmark::State& s) { row_backward_case<Exec, T>(s, be, kind, sh.first, sh.second, 1); });
        reg.add(base + "/kflash",
                [=](benchmark::State& s) { row_backward_case<Exec, T>(s, be, kind, sh.first, sh.second, 0); });
      };
      add_grad(float());
      if (reg.opt.full) {
        add_grad(double());
        add_grad(kflash::bhalf_t());
        add_grad(kflash::half_t());
      }
    }
  }
  for (const Shape& sh : ce_shapes) {
    if (!reg.opt.full && sh.first != 256) continue;
    const auto add_ce_grad = [&](auto type_tag) {
      using T = decltype(type_tag);
      const std::string base = be + "/cross_entropy_backward/" + type_name<T>() + "/" + std::to_string(sh.first) + "x" +
                               std::to_string(sh.second);
      for (int variant : {1, 0, 2}) {
        if (variant == 1 && kflash::impl::is_half_type<T>) continue;  // 16-bit logits: kflash's calls only
        reg.add(
            base + (variant == 1   ? "/baseline_log_softmax_backward"
                    : variant == 0 ? "/kflash"
                                   : "/kflash_without_lse"),
            [=](benchmark::State& s) { cross_entropy_backward_case<Exec, T>(s, be, sh.first, sh.second, variant); });
      }
    };
    add_ce_grad(float());
    if (reg.opt.full) add_ce_grad(kflash::bhalf_t());
  }

  // attention and decode
  std::vector<AttnCase> cases;
  if (reg.opt.full) {
    for (bool causal : {false, true})
      for (AttnCase c : {AttnCase{1, 8, 8, 1024, 1024, 64, causal, false}, AttnCase{1, 8, 8, 4096, 4096, 64, causal, false},
                         AttnCase{1, 4, 4, 4096, 4096, 128, causal, false},
                         AttnCase{1, 1, 1, 16384, 16384, 64, causal, false}})
        cases.push_back(c);
    cases.push_back({1, 8, 1, 1, 65536, 128, false, true});
    cases.push_back({1, 8, 1, 1, 1048576, 128, false, true});
    // Options: a sliding window of 1024 (against full attention at 16384), each score option
    // against plain attention of the same shape.
    cases.push_back({1, 1, 1, 16384, 16384, 64, false, false, 1024});
    for (AttnOption o : {AttnOption::softcap, AttnOption::alibi, AttnOption::sinks, AttnOption::bias, AttnOption::mask})
      cases.push_back({1, 8, 8, 1024, 1024, 64, false, false, -1, o});
    // A user mask of 512-token documents with its block mask, against plain attention at 4096.
    cases.push_back({1, 8, 8, 4096, 4096, 64, false, false, -1, AttnOption::documents});
    // Sequences: 16 packed sequences of 1 to 4096 against one sequence of as many pairs; decode
    // from 64-slot pages against the contiguous decode above.
    const AttnCase varlen{16, 1, 1, 4096, 4096, 64, false, false, -1, AttnOption::none, AttnLayout::varlen};
    const index_t n = varlen_equivalent(varlen);
    cases.push_back(varlen);
    cases.push_back({1, 1, 1, n, n, 64, false, false});
    cases.push_back({1, 8, 1, 1, 65536, 128, false, true, -1, AttnOption::none, AttnLayout::paged});
    cases.push_back({1, 8, 1, 1, 1048576, 128, false, true, -1, AttnOption::none, AttnLayout::paged});
  } else {
    cases = {{1, 8, 8, 1024, 1024, 64, false, false},
             {1, 8, 8, 1024, 1024, 64, true, false},
             {1, 8, 8, 1024, 1024, 64, false, false, 256},
             {1, 8, 8, 1024, 1024, 64, false, false, -1, AttnOption::softcap},
             {1, 8, 1, 1, 65536, 128, false, true},
             {1, 8, 1, 1, 65536, 128, false, true, -1, AttnOption::none, AttnLayout::paged}};
  }
  auto add_attention = [&](auto type_tag, const AttnCase& c) {
    using T = decltype(type_tag);
    const std::string base =
        be + (c.decode ? "/decode/" : "/attention/") + type_name<T>() + "/" + attn_shape(c);
#if KFLASH_BENCH_HAS_CBLAS
    if (host && !kflash::impl::is_half_type<T> && c.window < 0 && c.option == AttnOption::none &&
        c.layout == AttnLayout::dense)  // no options
      reg.add(base + "/baseline_materialised",
              [=](benchmark::State& s) { attention_case<Exec, T>(s, be, c, 1, threads); });
#endif
#if KFLASH_BENCH_HAS_ONEDNN
    if (host && std::is_same<T, kflash::bhalf_t>::value && c.window < 0 && c.option == AttnOption::none &&
        c.layout == AttnLayout::dense)
      reg.add(base + "/baseline_onednn",
              [=](benchmark::State& s) { attention_case<Exec, T>(s, be, c, onednn_variant, threads); });
#endif
    reg.add(base + "/kflash", [=](benchmark::State& s) { attention_case<Exec, T>(s, be, c, 0, threads); });
  };
  for (const AttnCase& c : cases) {
    add_attention(float(), c);
    if (reg.opt.full) add_attention(double(), c);
  }
  // 16-bit q, k, v, o (full grid): prefill at 4096 and decode, against the float cases above.
  if (reg.opt.full)
    for (const AttnCase& c :
         {AttnCase{1, 8, 8, 4096, 4096, 64, false, false}, AttnCase{1, 8, 8, 4096, 4096, 64, true, false},
          AttnCase{1, 4, 4, 4096, 4096, 128, false, false}, AttnCase{1, 8, 1, 1, 65536, 128, false, true},
          AttnCase{1, 8, 1, 1, 1048576, 128, false, true}}) {
      add_attention(kflash::bhalf_t(), c);
      add_attention(kflash::half_t(), c);
    }

  // attention_backward, after its materialised baseline on hosts: the default grid has 1024 rows,
  // causal; the full grid the forward's long shapes, causal and not, and GQA.
  std::vector<AttnCase> backward_cases;
  if (reg.opt.full) {
    for (bool causal : {false, true})
      for (AttnCase c : {AttnCase{1, 8, 8, 1024, 1024, 64, causal, false}, AttnCase{1, 8, 8, 4096, 4096, 64, causal, false},
                         AttnCase{1, 4, 4, 4096, 4096, 128, causal, false},
                         AttnCase{1, 8, 2, 4096, 4096, 64, causal, false}})
        backward_cases.push_back(c);
  } else {
    backward_cases = {{1, 8, 8, 1024, 1024, 64, true, false}};
  }
  for (const AttnCase& c : backward_cases) {
    const auto add_backward = [&](auto type_tag) {
      using T = decltype(type_tag);
      const std::string base = be + "/attention_backward/" + type_name<T>() + "/" + attn_shape(c);
#if KFLASH_BENCH_HAS_CBLAS
      if (host)
        reg.add(base + "/baseline_materialised",
                [=](benchmark::State& s) { attention_backward_case<Exec, T>(s, be, c, 1, threads); });
#endif
      reg.add(base + "/kflash", [=](benchmark::State& s) { attention_backward_case<Exec, T>(s, be, c, 0, threads); });
    };
    add_backward(float());
    if (reg.opt.full) add_backward(double());
  }
}

/// Prints a progress line per finished benchmark and keeps the runs for the table.
class ProgressReporter : public benchmark::BenchmarkReporter {
 public:
  explicit ProgressReporter(std::size_t total) : total_(total) {}
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      runs_.push_back(r);
      std::fprintf(stderr, "[%3zu/%zu] %-62s %10.3f ms%s\n", runs_.size(), total_,
                   r.run_name.function_name.c_str(),
                   r.GetAdjustedRealTime(), r.error_occurred ? ("  ERROR " + r.error_message).c_str() : "");
    }
  }
  const std::vector<Run>& runs() const { return runs_; }

 private:
  std::size_t total_;
  std::vector<Run> runs_;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string counter(const benchmark::BenchmarkReporter::Run& r, const char* name, const char* f, double scale = 1) {
  auto it = r.counters.find(name);
  return it == r.counters.end() ? "-" : fmt(f, double(it->second) * scale);
}

/// A JSON benchmark name as registered: without Google Benchmark's /min_time:..., /iterations:...
/// and /manual_time suffixes.
std::string registered_name(const std::string& json_name) {
  return std::regex_replace(json_name, std::regex("/min_time:[^/]*|/iterations:[^/]*|/manual_time"), "");
}

/// The baseline a benchmark's speed-up divides by (its variant name without "baseline_"), or "".
std::string speedup_baseline(const std::string& name) {
  const auto last = name.rfind('/');
  const std::string variant = name.substr(last + 1);
  std::string key = name.substr(0, last);
  if (variant.rfind("kflash_stream", 0) == 0) key += "/one-shot";
  const auto& names = shared().baseline_name;
  const auto it = names.find(key);
  if (it == names.end()) return "";
  return it->second.rfind("baseline_", 0) == 0 ? it->second.substr(9) : it->second;
}

void print_table(const std::vector<benchmark::BenchmarkReporter::Run>& runs) {
  std::printf("\n%-7s %-12s %-28s %-29s %10s %14s %9s %9s %-13s %18s\n", "backend", "kernel", "shape", "variant",
              "time [ms]", "rate", "of limit", "speed-up", "over", "extra MiB (base)");
  for (const auto& r : runs) {
    const std::string name = r.run_name.function_name;
    // backend/kernel/.../variant: the shape is everything between kernel and variant
    const auto first = name.find('/'), second = name.find('/', first + 1), last = name.rfind('/');
    const std::string backend = name.substr(0, first), kernel = name.substr(first + 1, second - first - 1);
    const std::string shape = second < last ? name.substr(second + 1, last - second - 1) : "";
    const std::string variant = name.substr(last + 1);
    const std::string unit = r.report_label.empty() ? "" : " " + r.report_label;
    std::string extra = counter(r, "extra_MiB", "%.1f");
    if (r.counters.count("baseline_extra_MiB")) extra += " (" + counter(r, "baseline_extra_MiB", "%.1f") + ")";
    const std::string over = r.counters.count("speedup_vs_baseline") ? speedup_baseline(name) : "";
    std::printf("%-7s %-12s %-28s %-29s %10.3f %14s %9s %9s %-13s %18s\n", backend.c_str(), kernel.c_str(),
                shape.c_str(), variant.c_str(), r.GetAdjustedRealTime(),
                (counter(r, "rate", "%.2f", 1e-9) + unit).c_str(), counter(r, "frac_of_limit", "%.2f").c_str(),
                counter(r, "speedup_vs_baseline", "%.2fx").c_str(), over.c_str(),
                variant == "kflash" ? extra.c_str() : "");
  }
  std::printf(
      "\ntime and rate: the mean of the timed calls. rate: GB/s of minimum traffic (softmax/log_softmax 1 read\n"
      "+ 1 write, logsumexp 1 read, decode K and V read once; their gradients 2 reads + 1 write, logsumexp's\n"
      "and cross-entropy's 1 read + 1 write) or GFLOP/s (attention 4 B H D times the visible pairs). of\n"
      "limit: the median call (JSON counter 'median_s') against copy bandwidth (softmax, log_softmax,\n"
      "logsumexp_backward, cross_entropy_backward), triad bandwidth (softmax_backward,\n"
      "log_softmax_backward), read bandwidth (logsumexp, decode) or, for attention, the multiply-add peak\n"
      "(fma_fp32/fp64: independent chains in registers on every thread, per instruction set on the host),\n"
      "measured in this run: the peaks above by their median call, a bandwidth again right after each\n"
      "case (the best of 4 calls: the machine's bandwidth drifts; the JSON counter 'limit' has the value\n"
      "used). The JSON also has host attention\n"
      "against sgemm/dgemm 2048^3 through OpenBLAS with the same threads (frac_of_blas_gemm). speed-up: over\n"
      "the fastest baseline of the same case, named under 'over' (kflash_stream*: over kflash's one-shot\n"
      "kernel; the stream's tiles are read, written and read again). extra MiB: kflash workspace, host\n"
      "softmax's team scratch included (baseline: its score buffer / row statistics).\n");
}

/// The peers measured as baselines, and whether this build has them (Debian package to install).
struct Peer {
  const char* name;
  bool present;
  const char* role;
  const char* package;
};
const Peer peers[] = {
    {"OpenBLAS", KFLASH_BENCH_HAS_CBLAS != 0, "sgemm/dgemm baseline, materialised attention", "libopenblas-dev"},
    {"oneDNN", KFLASH_BENCH_HAS_ONEDNN != 0,
     "softmax and log_softmax baseline (fp32, bf16), bf16 attention baseline (host)", "libdnnl-dev (2.x)"},
};

/// "OpenBLAS, oneDNN" or "OpenBLAS, oneDNN (missing)".
std::string peer_list() {
  std::string s;
  for (const Peer& p : peers) s += (s.empty() ? "" : ", ") + std::string(p.name) + (p.present ? "" : " (missing)");
  return s;
}

/// With --full, names each missing peer (a whole run is meant to have them all).
void report_missing_peers(std::FILE* out) {
  for (const Peer& p : peers)
    if (!p.present)
      std::fprintf(out, "kflash-bench: peer %s missing (%s): install %s and rebuild\n", p.name, p.role, p.package);
}

/// Adds to results.json what is known only after the run: every limit measured (context "limits":
/// bytes/s or FLOP/s) and, for each benchmark with a speed-up, the baseline it divides by.
void annotate_json(const std::string& path) {
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in);
  in.close();
  for (const auto& [key, value] : shared().limit) j["context"]["limits"][key] = value;
  for (auto& b : j["benchmarks"]) {
    if (!b.contains("speedup_vs_baseline")) continue;
    b["speedup_over"] = speedup_baseline(registered_name(b.at("name").get<std::string>()));
  }
  std::ofstream(path) << j.dump(1) << "\n";
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

/// A limit every fraction may divide by: measured, positive and finite.
bool valid_limit(double value) { return std::isfinite(value) && value > 0; }

/// --check-limits: the limits measured in this run, for every backend run. Each must be valid (the
/// exit status is 1 otherwise). Whether they are plausible is printed, never decides the status: a
/// busy machine lowers one measurement more than another. A limit below what a real kernel reaches
/// would inflate every fraction: the multiply-add peak should be at least a 512^3 sgemm's rate, and
/// reading at least half as fast as copying.
int check_limits(const std::set<std::string>& backends, const std::string& only) {
  int invalid = 0;
  const auto& limit = shared().limit;
  auto get = [&](const std::string& key) { return limit.count(key) ? limit.at(key) : 0.0; };
  for (const std::string& be : backends) {
    if (!only.empty() && be != only) continue;
    const double read = get(be + "/read_bw"), copy = get(be + "/copy_bw"), triad = get(be + "/triad_bw"),
                 fma32 = get(be + "/fma_fp32"), fma64 = get(be + "/fma_fp64"), sgemm = get(be + "/sgemm_512");
    auto require = [&](bool ok, const std::string& what) {
      std::printf("%-7s %-60s %s\n", be.c_str(), what.c_str(), ok ? "ok" : "INVALID");
      invalid += !ok;
    };
    auto note = [&](bool ok, const std::string& what) {
      std::printf("%-7s %-60s %s\n", be.c_str(), what.c_str(), ok ? "plausible" : "implausible (busy machine?)");
    };
    char line[200];
    std::snprintf(line, sizeof line, "read %.1f, copy %.1f, triad %.1f GB/s: positive, finite", read * 1e-9,
                  copy * 1e-9, triad * 1e-9);
    require(valid_limit(read) && valid_limit(copy) && valid_limit(triad), line);
    std::snprintf(line, sizeof line, "read %.1f GB/s >= copy / 2 = %.1f GB/s", read * 1e-9, copy * 5e-10);
    note(read >= copy / 2, line);
    if (!limit.count(be + "/fma_fp32")) continue;  // no peak kernels in this build (host code through nvcc)
    std::snprintf(line, sizeof line, "fma_fp32 %.1f, fma_fp64 %.1f GFLOP/s: positive, finite", fma32 * 1e-9,
                  fma64 * 1e-9);
    require(valid_limit(fma32) && valid_limit(fma64), line);
    if (limit.count(be + "/sgemm_512")) {
      std::snprintf(line, sizeof line, "fma_fp32 %.1f GFLOP/s >= sgemm 512^3 %.1f GFLOP/s", fma32 * 1e-9,
                    sgemm * 1e-9);
      note(fma32 >= sgemm, line);
    }
  }
  return invalid ? 1 : 0;
}

/// --check-json: a results.json this program wrote is well formed: a context with at least one
/// limit, every limit valid, and every benchmark named, timed, and, where it has one, with a valid
/// 'limit' counter; one with a fraction of its limit also with the median call it divides. Returns
/// the exit status.
int check_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot read " + path);
  const auto j = nlohmann::json::parse(f);
  int bad = 0;
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) std::printf("%s: %s\n", path.c_str(), what.c_str());
    bad += !ok;
  };
  const auto& limits = j.at("context").at("limits");
  require(limits.is_object() && !limits.empty(), "context.limits is missing or empty");
  for (const auto& [key, value] : limits.items())
    require(value.is_number() && valid_limit(value.get<double>()), "context.limits." + key + " is not positive");
  const auto& benchmarks = j.at("benchmarks");
  require(benchmarks.is_array() && !benchmarks.empty(), "no benchmarks");
  for (const auto& b : benchmarks) {
    const std::string name = b.value("name", "");
    require(!name.empty(), "a benchmark without a name");
    require(b.contains("real_time") && b.at("real_time").is_number() && b.at("real_time").get<double>() > 0,
            name + ": real_time is not positive");
    if (b.contains("limit"))
      require(b.at("limit").is_number() && valid_limit(b.at("limit").get<double>()), name + ": limit is not positive");
    if (b.contains("frac_of_limit"))
      require(b.contains("median_s") && b.at("median_s").is_number() && valid_limit(b.at("median_s").get<double>()),
              name + ": median_s, the call its fraction divides, is missing or not positive");
  }
  std::printf("%s: %zu limits, %zu benchmarks, %s\n", path.c_str(), limits.size(), benchmarks.size(),
              bad ? "MALFORMED" : "well formed");
  return bad ? 1 : 0;
}

int compare(const std::string& a_path, const std::string& b_path) {
  auto load = [](const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::map<std::string, double> times;  // name -> ms
    const auto j = nlohmann::json::parse(f);
    for (const auto& b : j.at("benchmarks")) {
      if (b.value("run_type", "iteration") != "iteration") continue;
      const std::string unit = b.value("time_unit", "ns");
      const double scale = unit == "ns" ? 1e-6 : unit == "us" ? 1e-3 : unit == "ms" ? 1 : 1e3;
      const std::string name = registered_name(b.at("name").get<std::string>());
      times[name] = b.at("real_time").get<double>() * scale;
    }
    return times;
  };
  auto a = load(a_path), b = load(b_path);
  // Same names, or (comparing two backends) the same names after the backend.
  auto strip = [](const std::map<std::string, double>& m) {
    std::map<std::string, double> out;
    for (const auto& [name, t] : m) out[name.substr(name.find('/') + 1)] = t;
    return out;
  };
  bool any = false;
  for (const auto& kv : a) any = any || b.count(kv.first);
  if (!any) a = strip(a), b = strip(b);
  std::printf("%-70s %12s %12s %10s\n", "benchmark", "A [ms]", "B [ms]", "A / B");
  int n = 0;
  for (const auto& [name, ta] : a) {
    auto it = b.find(name);
    if (it == b.end()) continue;
    std::printf("%-70s %12.3f %12.3f %9.2fx\n", name.c_str(), ta, it->second, ta / it->second);
    ++n;
  }
  std::printf("%d benchmarks in both files (A / B > 1: B is faster)\n", n);
  return n > 0 ? 0 : 1;
}

}  // namespace
}  // namespace kflash_bench

int main(int argc, char* argv[]) {
  using namespace kflash_bench;
  Options opt;
  std::vector<char*> passthrough = {argv[0]};  // Kokkos options
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kflash-bench: %s needs a value\n%s", a.c_str(), usage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--backend") opt.backend = next();
    else if (a == "--filter") opt.filter = next();
    else if (a == "--full") opt.full = true;
    else if (a == "--check-limits") opt.check_limits = true;
    else if (a == "--check-json") opt.check_json = next();
    else if (a == "--out") opt.out = next();
    else if (a == "--compare") {
      opt.compare.push_back(next());
      opt.compare.push_back(next());
    } else if (a == "--help" || a == "-h") {
      std::printf("%s", usage);
      return 0;
    } else if (a.rfind("--kokkos", 0) == 0) passthrough.push_back(argv[i]);
    else {
      std::fprintf(stderr, "kflash-bench: unknown argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (!opt.check_json.empty()) {
    try {
      return check_json(opt.check_json);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kflash-bench --check-json: %s\n", e.what());
      return 1;
    }
  }
  if (!opt.compare.empty()) {
    try {
      return compare(opt.compare[0], opt.compare[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kflash-bench --compare: %s\n", e.what());
      return 2;
    }
  }

  // OpenBLAS's threads inherit the binding of the thread that starts them: with the main thread
  // pinned to one core (OMP_PROC_BIND=spread/close/true), the GEMM limit measured about 2.5x too
  // low here, which would inflate every attention fraction. Unpinned unless the user says otherwise.
  const char* bind = std::getenv("OMP_PROC_BIND");
  if (!bind) {
    setenv("OMP_PROC_BIND", "false", 1);
  } else if (std::string(bind) != "false") {
    std::fprintf(stderr,
                 "kflash-bench: warning: OMP_PROC_BIND=%s pins the main thread, and OpenBLAS's threads "
                 "inherit its binding: the GEMM limit and the attention baseline may be understated\n",
                 bind);
  }
  int kargc = int(passthrough.size());
  Kokkos::ScopeGuard guard(kargc, passthrough.data());
  kflash::print_configuration(std::cout);

  Registry reg;
  reg.opt = opt;
  if (opt.check_limits) reg.opt.filter = "^$";  // the limits only (they always run)
  std::set<std::string> known;
#if KFLASH_HAS_SERIAL
  register_backend<Kokkos::Serial>(reg);
  known.insert("Serial");
#endif
#if KFLASH_HAS_OPENMP
  register_backend<Kokkos::OpenMP>(reg);
  known.insert("OpenMP");
#endif
#if KFLASH_HAS_CUDA
  register_backend<Kokkos::Cuda>(reg);
  known.insert("Cuda");
#endif
  if (!opt.backend.empty() && !known.count(opt.backend)) {
    std::fprintf(stderr, "kflash-bench: backend '%s' is not in this build (%s)\n", opt.backend.c_str(),
                 KFLASH_BACKENDS);
    return 2;
  }
  for (auto& [name, f] : reg.entries) {
    auto* b = benchmark::RegisterBenchmark(name.c_str(), f)->UseManualTime()->Unit(benchmark::kMillisecond);
    // Google Benchmark calls a body again with more iterations until MinTime is reached, and each
    // call fills its inputs again: device cases (about a millisecond an iteration, see run_timed)
    // run a fixed count instead.
    if (name.rfind("Cuda/", 0) == 0) b->Iterations(20);
    else b->MinTime(0.2);
  }

  // Context recorded in the JSON.
  benchmark::AddCustomContext("kflash_version", KFLASH_VERSION_STRING);
  benchmark::AddCustomContext("kokkos_version", KFLASH_KOKKOS_VERSION_STRING);
  benchmark::AddCustomContext("kflash_backends", KFLASH_BACKENDS);
  benchmark::AddCustomContext("cpu_model", cpu_model());
#if KFLASH_HAS_OPENMP
  benchmark::AddCustomContext("openmp_threads", std::to_string(Kokkos::OpenMP().concurrency()));
#endif
  benchmark::AddCustomContext("host_blas", KFLASH_BENCH_HAS_CBLAS ? "OpenBLAS (CBLAS)" : "none");
  benchmark::AddCustomContext("host_kernels_isa", kflash::impl::host::isa_name(kflash::impl::host::isa()));
#if KFLASH_BENCH_HAS_HOST_PEAK
  benchmark::AddCustomContext("host_peak_isa", peak_isa_name(best_peak_isa()));
  benchmark::AddCustomContext("host_bf16_dot", has_bf16_dot() ? "AVX512-BF16" : "none");
  benchmark::AddCustomContext("host_amx", has_amx() ? "AMX-BF16" : "none");
#endif
  benchmark::AddCustomContext("host_cpus", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("peers", peer_list());
  if (opt.full) report_missing_peers(stderr);
#if KFLASH_HAS_CUDA
  {
    cudaDeviceProp prop;
    int driver = 0, device = 0;
    cudaGetDevice(&device);
    cudaGetDeviceProperties(&prop, device);
    cudaDriverGetVersion(&driver);
    const std::string gpu = std::string(prop.name) + ", " + std::to_string(prop.multiProcessorCount) +
                            " SMs, compute capability " + std::to_string(prop.major) + "." +
                            std::to_string(prop.minor) + ", CUDA driver API " + std::to_string(driver);
    benchmark::AddCustomContext("cuda_device", gpu);
    std::printf("CUDA device: %s\n", gpu.c_str());
  }
#endif

  std::vector<std::string> bench_args = {argv[0]};
  if (!opt.out.empty()) {
    std::system(("mkdir -p '" + opt.out + "'").c_str());
    bench_args.push_back("--benchmark_out=" + opt.out + "/results.json");
    bench_args.push_back("--benchmark_out_format=json");
  }
  std::vector<char*> bargv;
  for (auto& s : bench_args) bargv.push_back(s.data());
  int bargc = int(bargv.size());
  benchmark::Initialize(&bargc, bargv.data());
  std::fprintf(stderr, "kflash-bench: %zu benchmarks (%s selection)\n", reg.entries.size(),
               opt.full ? "full" : "default");
  ProgressReporter progress(reg.entries.size());
  benchmark::RunSpecifiedBenchmarks(&progress);
  benchmark::Shutdown();
  print_table(progress.runs());
  if (opt.full) report_missing_peers(stdout);

  if (!opt.out.empty()) {
    annotate_json(opt.out + "/results.json");
    std::printf("\nwrote %s/results.json\n", opt.out.c_str());
    // The script in the source tree, or installed beside the executable (bin/../share/kflash).
    std::string script = KFLASH_PLOT_SCRIPT;
    if (!std::ifstream(script)) {
      char exe[4096] = {};
      const auto n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      const std::string dir = n > 0 ? std::string(exe, std::size_t(n)) : std::string(".");
      script = dir.substr(0, dir.rfind('/')) + "/../share/kflash/kflash_plot.py";
    }
    const std::string cmd = "/usr/bin/python3 '" + script + "' '" + opt.out + "/results.json' '" + opt.out +
                            "/summary.png'";
    std::fflush(stdout);  // the script's lines after the table's, not inside it
    if (std::system(cmd.c_str()) == 0) std::printf("wrote %s/summary.png\n", opt.out.c_str());
    else std::printf("summary.png not written: plotting needs /usr/bin/python3 with matplotlib (%s)\n", script.c_str());
  }
  for (const auto& r : progress.runs())
    if (r.error_occurred) return 1;
  return opt.check_limits ? check_limits(known, opt.backend) : 0;
}
