// libFuzzer harness over the C interface (include/kflash/kflash.h): any bytes become one call,
// kflash_softmax/log_softmax/logsumexp_f32/f64 or their _backward_ gradients (also bf16, f16),
// kflash_attention (fp32, fp64, bf16, fp16; every option array, varlen, paged)
// or kflash_attention_backward (the same arrays, o and lse as inputs, the gradients as outputs),
// or kflash_merge_attention, kflash_cross_entropy or its _backward (fp32, fp64, bf16, fp16 logits),
// with descriptors drawn from the bytes: mostly consistent shapes, then
// any field changed to any value (ranks, dtypes, negative or huge extents and strides, index arrays
// pointing anywhere, outputs aliasing inputs, wrong memory kinds and struct sizes).
//
// Every array a descriptor names is allocated to exactly the elements the descriptor addresses, on
// its own (AddressSanitizer catches any access past it); one that would address more than
// max_elements gets data NULL. What must hold for every input:
//   - the call returns a kflash_status, never crashes, never reads or writes outside the arrays;
//   - inputs are never written; on an error no output has been written, kflash_last_error() names
//     the function, and on success it is empty.
// Built with clang -fsanitize=fuzzer,address,undefined by the 'fuzz-c' lane of cmake/kflash-dev.sh;
// `kflash_fuzz_c FILE` repeats the input of a crash file libFuzzer wrote.
#include <kflash/kflash.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

constexpr std::int64_t max_elements = 1 << 15;

/// Reads the fuzzer's bytes as values; past the end every read is 0.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t bits(int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; i += 8) v |= std::uint64_t(pos_ < size_ ? data_[pos_++] : 0) << i;
    return n >= 64 ? v : v & ((std::uint64_t(1) << n) - 1);
  }
  std::uint8_t byte() { return std::uint8_t(bits(8)); }
  bool chance(int in256) { return byte() < in256; }
  /// Mostly small values in [lo, lo + span), now and then anything (negative, huge).
  std::int64_t extent(std::int64_t lo, std::int64_t span) {
    if (chance(12)) return std::int64_t(bits(64));
    return lo + std::int64_t(byte() % span);
  }
  double real() {
    switch (byte() % 8) {
      case 0: {
        double d;
        const std::uint64_t b = bits(64);
        std::memcpy(&d, &b, sizeof d);
        return d;  // any bits: NaN, infinities, subnormals
      }
      default: return (double(int(bits(16)) - 32768)) / 4096.0;
    }
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

std::size_t element_size(kflash_dtype t) {
  switch (t) {
    case KFLASH_FLOAT32: case KFLASH_INT32: return 4;
    case KFLASH_FLOAT64: case KFLASH_INT64: return 8;
    case KFLASH_BOOL: return 1;
    case KFLASH_BFLOAT16: case KFLASH_FLOAT16: return 2;
    default: return 8;
  }
}

/// One array the call sees, with a copy of its bytes from before the call.
struct Buffer {
  std::unique_ptr<unsigned char[]> data;
  std::size_t bytes = 0;
  std::vector<unsigned char> before;
  bool output = false;
  bool passed = true;  // false: an option array the call does not see (options NULL or cut short)
};

class Call {
 public:
  explicit Call(Bytes& in) : in_(in) {}

  /// Elements a descriptor addresses (contiguous when every stride is 0), or -1 when it addresses
  /// more than max_elements, or has a negative extent or stride (nothing to allocate).
  static std::int64_t addressed(const kflash_array& a) {
    if (a.rank < 1 || a.rank > KFLASH_MAX_RANK) return 0;
    bool contiguous = true, empty = false;
    for (int d = 0; d < a.rank; ++d) {
      if (a.extent[d] < 0 || a.stride[d] < 0) return -1;
      contiguous = contiguous && a.stride[d] == 0;
      empty = empty || a.extent[d] == 0;
    }
    if (empty) return 0;
    __int128 n = 1;
    for (int d = 0; d < a.rank; ++d) {
      n = contiguous ? n * a.extent[d] : n + __int128(a.extent[d] - 1) * a.stride[d];
      if (n > max_elements) return -1;
    }
    return std::int64_t(n);
  }

  /// A buffer for descriptor `a` filled from the bytes (floating values, bools or indices that
  /// mostly lie in [0, 2 * index_range)), or data NULL where it would be too large.
  void allocate(kflash_array& a, bool output, std::int64_t index_range = 8) {
    const std::int64_t n = addressed(a);
    if (n < 0) {
      a.data = nullptr;
      return;
    }
    Buffer b;
    b.output = output;
    b.bytes = std::size_t(n) * element_size(a.dtype);
    b.data.reset(new unsigned char[b.bytes ? b.bytes : 1]);
    for (std::int64_t i = 0; i < n; ++i) {
      unsigned char* p = b.data.get() + std::size_t(i) * element_size(a.dtype);
      switch (a.dtype) {
        case KFLASH_FLOAT32: { const float f = float(in_.real()); std::memcpy(p, &f, 4); break; }
        case KFLASH_INT32: { const std::int32_t v = std::int32_t(in_.extent(0, 2 * index_range)); std::memcpy(p, &v, 4); break; }
        case KFLASH_INT64: { const std::int64_t v = in_.extent(0, 2 * index_range); std::memcpy(p, &v, 8); break; }
        case KFLASH_BOOL: *p = in_.byte() & 1; break;  // only 0 and 1 are values of bool
        case KFLASH_BFLOAT16: case KFLASH_FLOAT16: { const std::uint16_t v = std::uint16_t(in_.bits(16)); std::memcpy(p, &v, 2); break; }
        default: { const double d = in_.real(); std::memcpy(p, &d, 8); break; }
      }
    }
    b.before.assign(b.data.get(), b.data.get() + b.bytes);
    a.data = b.data.get();
    buffers_.push_back(std::move(b));
  }

  /// A descriptor of dtype t and the given extents, contiguous or strided, then perhaps changed.
  kflash_array array(kflash_dtype t, std::vector<std::int64_t> extents) {
    kflash_array a{};
    a.dtype = t;
    a.rank = int(extents.size());
    for (int d = 0; d < a.rank; ++d) a.extent[d] = extents[std::size_t(d)];
    if (in_.chance(60)) {  // strided: rows padded, or a permuted layout
      std::int64_t s = 1;
      for (int d = a.rank - 1; d >= 0; --d) {
        a.stride[d] = s;
        s *= (a.extent[d] > 0 ? a.extent[d] : 1) + std::int64_t(in_.byte() % 3);
      }
      if (in_.chance(40) && a.rank >= 2) std::swap(a.stride[0], a.stride[a.rank - 1]);
    }
    if (in_.chance(24)) {  // one field changed to anything
      switch (in_.byte() % 5) {
        case 0: a.dtype = kflash_dtype(int(in_.bits(32))); break;
        case 1: a.rank = int(in_.byte()) - 2; break;
        case 2: a.extent[in_.byte() % KFLASH_MAX_RANK] = in_.extent(0, 40); break;
        case 3: a.stride[in_.byte() % KFLASH_MAX_RANK] = in_.extent(0, 40); break;
        default: a.dtype = kflash_dtype(in_.byte() % 7); break;
      }
    }
    return a;
  }

  /// Checks what must hold after a call that returned `status` (aborts otherwise).
  void check(const char* function, kflash_status status) const {
    if (status < KFLASH_SUCCESS || status > KFLASH_ERROR_INTERNAL) fatal(function, "status out of range");
    const std::string message = kflash_last_error();
    if (status == KFLASH_SUCCESS && !message.empty()) fatal(function, "success with a message");
    if (status != KFLASH_SUCCESS && message.rfind(std::string(function) + ": ", 0) != 0)
      fatal(function, ("an error whose message does not name the function: " + message).c_str());
    for (std::size_t i = 0; i < buffers_.size(); ++i) {
      const Buffer& b = buffers_[i];
      const bool same = b.bytes == 0 || std::memcmp(b.data.get(), b.before.data(), b.bytes) == 0;
      const std::string which = "array " + std::to_string(i) + " of " + std::to_string(buffers_.size()) + " (" +
                                std::to_string(b.bytes) + " bytes), status " + std::to_string(int(status)) + " '" +
                                message + "'";
      if (!same && !b.output && b.passed) fatal(function, ("an input was written: " + which).c_str());
      if (!same && status != KFLASH_SUCCESS) fatal(function, ("an output was written on an error: " + which).c_str());
    }
  }

  /// Marks the buffer of `a` as one the call does not see (written only through an output alias).
  void not_passed(const kflash_array& a) {
    for (Buffer& b : buffers_)
      if (a.data != nullptr && b.data.get() == a.data) b.passed = false;
  }

  /// Marks the buffer of `a` as one the call may write (an input that an output is allowed to
  /// alias: cross_entropy_backward's dlogits over its logits).
  void may_write(const kflash_array& a) {
    for (Buffer& b : buffers_)
      if (a.data != nullptr && b.data.get() == a.data) b.output = true;
  }

  /// Makes `a` share the memory of an earlier buffer (aliasing an input or another output).
  void alias(kflash_array& a) {
    if (buffers_.empty()) return;
    const Buffer& b = buffers_[in_.byte() % buffers_.size()];
    a.data = b.data.get();
    const std::int64_t n = addressed(a);
    if (n < 0 || std::size_t(n) * element_size(a.dtype) > b.bytes) a.data = nullptr;  // would not fit
  }

 private:
  [[noreturn]] static void fatal(const char* function, const char* what) {
    std::fprintf(stderr, "kflash_fuzz_c: %s: %s\n", function, what);
    std::abort();
  }

  Bytes& in_;
  std::vector<Buffer> buffers_;
};

kflash_memory memory_kind(Bytes& in) {
  if (in.chance(248)) return KFLASH_MEMORY_HOST;
  return kflash_memory(int(in.bits(32)));
}

void fuzz_rows(Bytes& in) {
  const int op = in.byte() % 3;
  const bool f64 = in.byte() & 1;
  const kflash_memory memory = memory_kind(in);
  const std::int64_t rows = in.extent(0, 9), cols = in.extent(0, 70);
  // Strides near cols (wrapping, as the extents may be anything), now and then anything.
  std::int64_t x_stride = std::int64_t(std::uint64_t(cols) + in.byte() % 3 - (in.chance(16) ? 3u : 0u));
  if (in.chance(8)) x_stride = std::int64_t(in.bits(64));
  std::int64_t y_stride = in.chance(200) ? x_stride : in.extent(0, 80);
  Call call(in);
  // The rows as a 2-D descriptor: buffers sized by what the call addresses.
  kflash_array xa{}, ya{};
  xa.dtype = ya.dtype = f64 ? KFLASH_FLOAT64 : KFLASH_FLOAT32;
  xa.rank = ya.rank = 2;
  xa.extent[0] = ya.extent[0] = rows, xa.extent[1] = ya.extent[1] = cols;
  xa.stride[0] = rows > 1 ? x_stride : cols, xa.stride[1] = 1;
  ya.stride[0] = rows > 1 ? y_stride : cols, ya.stride[1] = 1;
  if (op == 2) ya.rank = 1, ya.extent[0] = rows, ya.stride[0] = 1;  // logsumexp: one value per row
  const bool in_place = op < 2 && in.chance(60);
  call.allocate(xa, in_place);  // in place, x is the output
  if (in_place) ya = xa;
  else call.allocate(ya, true);
  if (in.chance(10)) xa.data = nullptr;
  if (in.chance(10)) ya.data = nullptr;
  static const char* const names[2][3] = {{"kflash_softmax_f32", "kflash_log_softmax_f32", "kflash_logsumexp_f32"},
                                          {"kflash_softmax_f64", "kflash_log_softmax_f64", "kflash_logsumexp_f64"}};
  kflash_status s;
  if (!f64) {
    const float* x = static_cast<const float*>(xa.data);
    float* y = static_cast<float*>(ya.data);
    s = op == 0 ? kflash_softmax_f32(memory, rows, cols, x, x_stride, y, y_stride)
        : op == 1 ? kflash_log_softmax_f32(memory, rows, cols, x, x_stride, y, y_stride)
                  : kflash_logsumexp_f32(memory, rows, cols, x, x_stride, y);
  } else {
    const double* x = static_cast<const double*>(xa.data);
    double* y = static_cast<double*>(ya.data);
    s = op == 0 ? kflash_softmax_f64(memory, rows, cols, x, x_stride, y, y_stride)
        : op == 1 ? kflash_log_softmax_f64(memory, rows, cols, x, x_stride, y, y_stride)
                  : kflash_logsumexp_f64(memory, rows, cols, x, x_stride, y);
  }
  call.check(names[f64][op], s);
}

/// The dtype of a call's main arrays (q, rows, logits), and that of its per-row values, lse and
/// option arrays (float32 where the main arrays are 16-bit).
std::pair<kflash_dtype, kflash_dtype> storage_dtypes(Bytes& in) {
  const kflash_dtype types[4] = {KFLASH_FLOAT32, KFLASH_FLOAT64, KFLASH_BFLOAT16, KFLASH_FLOAT16};
  const kflash_dtype t = types[in.byte() % 4];
  return {t, t == KFLASH_BFLOAT16 || t == KFLASH_FLOAT16 ? KFLASH_FLOAT32 : t};
}

/// One row-gradient call (op 0 softmax_backward, 1 log_softmax_backward, 2 logsumexp_backward) of
/// row type T and per-row type L on the arrays d (a, b, dx) and per_row (lse, dlse).
template <class T, class L>
kflash_status row_grad(int op, kflash_memory memory, std::int64_t rows, std::int64_t cols, const kflash_array* d,
                       const kflash_array* per_row, const std::int64_t* strides,
                       kflash_status (*softmax_backward)(kflash_memory, int64_t, int64_t, const T*, int64_t, const T*,
                                                         int64_t, T*, int64_t),
                       kflash_status (*log_softmax_backward)(kflash_memory, int64_t, int64_t, const T*, int64_t,
                                                             const T*, int64_t, T*, int64_t),
                       kflash_status (*logsumexp_backward)(kflash_memory, int64_t, int64_t, const T*, int64_t,
                                                           const L*, const L*, T*, int64_t)) {
  const T* a = static_cast<const T*>(d[0].data);
  const T* b = static_cast<const T*>(d[1].data);
  T* dx = static_cast<T*>(d[2].data);
  if (op == 0) return softmax_backward(memory, rows, cols, a, strides[0], b, strides[1], dx, strides[2]);
  if (op == 1) return log_softmax_backward(memory, rows, cols, a, strides[0], b, strides[1], dx, strides[2]);
  return logsumexp_backward(memory, rows, cols, a, strides[0], static_cast<const L*>(per_row[0].data),
                            static_cast<const L*>(per_row[1].data), dx, strides[2]);
}

/// The row gradients: a (y, or x for logsumexp) and b (dy) as rows, lse and dlse (logsumexp) one
/// value per row, dx as rows, in place over dy (or x) now and then.
void fuzz_row_grads(Bytes& in) {
  const int op = in.byte() % 3;
  const auto [t, ts] = storage_dtypes(in);
  const kflash_memory memory = memory_kind(in);
  const std::int64_t rows = in.extent(0, 9), cols = in.extent(0, 70);
  std::int64_t strides[3];
  for (std::int64_t& s : strides) {
    s = std::int64_t(std::uint64_t(cols) + in.byte() % 3 - (in.chance(16) ? 3u : 0u));
    if (in.chance(8)) s = std::int64_t(in.bits(64));
  }
  Call call(in);
  kflash_array rows_of[3]{}, per_row[2]{};  // a, b, dx; lse, dlse
  for (int i = 0; i < 3; ++i) {
    kflash_array& d = rows_of[i];
    d.dtype = t;
    d.rank = 2;
    d.extent[0] = rows, d.extent[1] = cols;
    d.stride[0] = rows > 1 ? strides[i] : cols, d.stride[1] = 1;
  }
  for (kflash_array& d : per_row) d.dtype = ts, d.rank = 1, d.extent[0] = rows, d.stride[0] = 1;
  const bool in_place = in.chance(60);  // dx over dy (softmax, log_softmax) or over x (logsumexp)
  const int over = op == 2 ? 0 : 1;
  call.allocate(rows_of[0], in_place && over == 0);
  if (op != 2) call.allocate(rows_of[1], in_place && over == 1);
  if (op == 2) for (kflash_array& d : per_row) call.allocate(d, false);
  if (in_place) rows_of[2] = rows_of[over], strides[2] = strides[over];
  else call.allocate(rows_of[2], true);
  for (kflash_array& d : rows_of)
    if (in.chance(10)) d.data = nullptr;
  static const char* const names[3] = {"kflash_softmax_backward_", "kflash_log_softmax_backward_",
                                       "kflash_logsumexp_backward_"};
  kflash_status status;
  const char* suffix;
  if (t == KFLASH_FLOAT64) {
    suffix = "f64";
    status = row_grad<double, double>(op, memory, rows, cols, rows_of, per_row, strides, kflash_softmax_backward_f64,
                                      kflash_log_softmax_backward_f64, kflash_logsumexp_backward_f64);
  } else if (t == KFLASH_BFLOAT16) {
    suffix = "bf16";
    status = row_grad<std::uint16_t, float>(op, memory, rows, cols, rows_of, per_row, strides,
                                            kflash_softmax_backward_bf16, kflash_log_softmax_backward_bf16,
                                            kflash_logsumexp_backward_bf16);
  } else if (t == KFLASH_FLOAT16) {
    suffix = "f16";
    status = row_grad<std::uint16_t, float>(op, memory, rows, cols, rows_of, per_row, strides,
                                            kflash_softmax_backward_f16, kflash_log_softmax_backward_f16,
                                            kflash_logsumexp_backward_f16);
  } else {
    suffix = "f32";
    status = row_grad<float, float>(op, memory, rows, cols, rows_of, per_row, strides, kflash_softmax_backward_f32,
                                    kflash_log_softmax_backward_f32, kflash_logsumexp_backward_f32);
  }
  call.check((std::string(names[op]) + suffix).c_str(), status);
}

void fuzz_attention(Bytes& in) {
  const auto [t, ts] = storage_dtypes(in);
  const kflash_memory memory = memory_kind(in);
  const std::int64_t B = 1 + in.byte() % 3, Hk = 1 + in.byte() % 2, Hq = Hk * (1 + in.byte() % 3);
  const std::int64_t Nq = in.byte() % 9, Nk = in.byte() % 13, D = 1 + in.byte() % 9, Dv = 1 + in.byte() % 9;
  const int kind = in.byte() % 4;  // 0, 1 dense, 2 varlen, 3 paged
  // kflash_attention_backward now and then: o and lse are then inputs (paged K/V is refused).
  const bool backward = in.chance(64);
  Call call(in);
  kflash_attention_options opt;
  kflash_attention_options_init(&opt);
  kflash_array q, k, v, o, lse;
  if (kind == 2) {
    q = call.array(t, {B * Nq, Hq, D}), o = call.array(t, {B * Nq, Hq, Dv}), lse = call.array(ts, {B * Nq, Hq});
    k = call.array(t, {B * Nk, Hk, D}), v = call.array(t, {B * Nk, Hk, Dv});
    opt.cu_seqlens_q = call.array(in.byte() & 1 ? KFLASH_INT64 : KFLASH_INT32, {B + 1});
    opt.cu_seqlens_k = call.array(in.byte() & 1 ? KFLASH_INT64 : KFLASH_INT32, {B + 1});
    call.allocate(opt.cu_seqlens_q, false, B * Nq / 2 + 1);
    call.allocate(opt.cu_seqlens_k, false, B * Nk / 2 + 1);
  } else if (kind == 3) {
    const std::int64_t pages = 1 + in.byte() % 6, page_size = 1 + in.byte() % 4, max_pages = 1 + in.byte() % 4;
    q = call.array(t, {B, Hq, Nq, D}), o = call.array(t, {B, Hq, Nq, Dv}), lse = call.array(ts, {B, Hq, Nq});
    k = call.array(t, {pages, page_size, Hk, D}), v = call.array(t, {pages, page_size, Hk, Dv});
    opt.block_table = call.array(in.byte() & 1 ? KFLASH_INT64 : KFLASH_INT32, {B, max_pages});
    opt.cache_seqlens = call.array(in.byte() & 1 ? KFLASH_INT64 : KFLASH_INT32, {B});
    call.allocate(opt.block_table, false, pages / 2 + 1);
    call.allocate(opt.cache_seqlens, false, page_size * max_pages / 2 + 1);
  } else {
    q = call.array(t, {B, Hq, Nq, D}), o = call.array(t, {B, Hq, Nq, Dv}), lse = call.array(ts, {B, Hq, Nq});
    k = call.array(t, {B, Hk, Nk, D}), v = call.array(t, {B, Hk, Nk, Dv});
  }
  call.allocate(q, false), call.allocate(k, false), call.allocate(v, false);
  if (in.chance(12)) call.alias(o);
  else call.allocate(o, !backward);
  const bool with_lse = backward || in.chance(160);
  if (with_lse) {
    if (in.chance(12)) call.alias(lse);
    else call.allocate(lse, !backward);
  }
  // Options: scalars, and the option arrays now and then (each shaped right, then perhaps changed).
  opt.scale = in.chance(200) ? 0 : in.real();
  opt.causal = in.chance(80);
  opt.window_left = in.chance(200) ? -1 : int(in.extent(-2, 8));
  opt.window_right = in.chance(200) ? -1 : int(in.extent(-2, 8));
  opt.softcap = in.chance(220) ? 0 : in.real();
  if (in.chance(30)) call.allocate(opt.alibi_slopes = call.array(ts, {Hq}), false);
  if (in.chance(30)) call.allocate(opt.sinks = call.array(ts, {Hq}), false);
  const std::int64_t bias_rows = Nq, bias_keys = kind == 3 ? 4 * Nk : Nk;
  if (in.chance(30)) call.allocate(opt.bias = call.array(ts, {B, Hq, bias_rows, bias_keys}), false);
  if (in.chance(30)) call.allocate(opt.mask = call.array(KFLASH_BOOL, {B, 1, bias_rows, bias_keys}), false);
  opt.schedule = in.chance(220) ? KFLASH_SCHEDULE_AUTOMATIC : kflash_schedule(int(in.extent(0, 4)));
  opt.num_splits = in.chance(200) ? 0 : int(in.extent(-1, 9));
  const std::size_t struct_size = in.chance(245) ? sizeof(opt) : std::size_t(in.bits(16));
  opt.struct_size = struct_size;
  const kflash_attention_options* options = in.chance(8) ? nullptr : &opt;
  // The option arrays the call reads: those its struct_size covers, none without options.
  const kflash_array kflash_attention_options::*const fields[] = {
      &kflash_attention_options::alibi_slopes, &kflash_attention_options::sinks, &kflash_attention_options::bias,
      &kflash_attention_options::mask, &kflash_attention_options::cu_seqlens_q, &kflash_attention_options::cu_seqlens_k,
      &kflash_attention_options::block_table, &kflash_attention_options::cache_seqlens};
  for (const auto field : fields) {
    const std::size_t end = std::size_t(reinterpret_cast<const char*>(&(opt.*field)) -
                                        reinterpret_cast<const char*>(&opt)) + sizeof(kflash_array);
    if (options == nullptr || struct_size < end) call.not_passed(opt.*field);
  }
  if (std::getenv("KFLASH_FUZZ_C_PRINT")) {
    auto pr = [](const char* n, const kflash_array& a) {
      std::fprintf(stderr, "%s data %p dtype %d rank %d ext %lld %lld %lld %lld stride %lld %lld %lld %lld\n", n, a.data, int(a.dtype), a.rank,
                   (long long)a.extent[0], (long long)a.extent[1], (long long)a.extent[2], (long long)a.extent[3],
                   (long long)a.stride[0], (long long)a.stride[1], (long long)a.stride[2], (long long)a.stride[3]);
    };
    pr("q", q), pr("k", k), pr("v", v), pr("o", o), pr("lse", lse), pr("cuq", opt.cu_seqlens_q), pr("cuk", opt.cu_seqlens_k);
    pr("bias", opt.bias), pr("mask", opt.mask), pr("alibi", opt.alibi_slopes), pr("sinks", opt.sinks);
    pr("table", opt.block_table), pr("lengths", opt.cache_seqlens);
    std::fprintf(stderr, "with_lse %d kind %d\n", int(with_lse), kind);
  }
  if (backward) {
    // dout like o; dq, dk, dv like q, k, v (now and then over another array); dsinks and dbias now
    // and then, shaped like their options.
    kflash_array dout = o, dq = q, dk = k, dv = v, dsinks{}, dbias{};
    call.allocate(dout, false);
    for (kflash_array* g : {&dq, &dk, &dv}) {
      if (in.chance(12)) call.alias(*g);
      else call.allocate(*g, true);
    }
    if (in.chance(40)) call.allocate(dsinks = call.array(ts, {Hq}), true);
    if (in.chance(40)) call.allocate(dbias = call.array(ts, {B, Hq, bias_rows, bias_keys}), true);
    const kflash_status s =
        kflash_attention_backward(memory, in.chance(4) ? nullptr : &q, &k, &v, &o, in.chance(4) ? nullptr : &lse,
                                  &dout, &dq, &dk, &dv, in.chance(8) ? nullptr : &dsinks,
                                  in.chance(8) ? nullptr : &dbias, options);
    call.check("kflash_attention_backward", s);
    return;
  }
  const kflash_status s = kflash_attention(memory, in.chance(4) ? nullptr : &q, &k, &v, &o, with_lse ? &lse : nullptr,
                                           options);
  call.check("kflash_attention", s);
}

void fuzz_merge(Bytes& in) {
  const auto [t, ts] = storage_dtypes(in);
  const kflash_memory memory = memory_kind(in);
  const std::int64_t S = in.byte() % 4, B = 1 + in.byte() % 2, H = 1 + in.byte() % 3, N = in.byte() % 6,
                     Dv = 1 + in.byte() % 9;
  Call call(in);
  kflash_array op = call.array(t, {S, B, H, N, Dv}), lp = call.array(ts, {S, B, H, N});
  kflash_array o = call.array(t, {B, H, N, Dv}), lse = call.array(ts, {B, H, N});
  call.allocate(op, false), call.allocate(lp, false);
  if (in.chance(16)) call.alias(o);
  else call.allocate(o, true);
  if (in.chance(16)) call.alias(lse);
  else call.allocate(lse, true);
  call.check("kflash_merge_attention", kflash_merge_attention(memory, &op, &lp, &o, &lse));
}

void fuzz_cross_entropy(Bytes& in) {
  const auto [t, ts] = storage_dtypes(in);  // the logits', and the loss's, dloss's and lse's
  const kflash_dtype it = in.byte() & 1 ? KFLASH_INT64 : KFLASH_INT32;
  const kflash_memory memory = memory_kind(in);
  const std::int64_t rows = in.byte() % 7, vocab = in.byte() % 12;
  const bool backward = in.byte() & 1, in_place = backward && in.chance(60);
  Call call(in);
  kflash_array logits = call.array(t, {rows, vocab}), targets = call.array(it, {rows});
  call.allocate(logits, in_place);
  call.allocate(targets, false, vocab / 2 + 1);  // mostly in [0, vocab], some past it
  kflash_cross_entropy_options opt;
  kflash_cross_entropy_options_init(&opt);
  opt.ignore_index = in.chance(200) ? -100 : in.extent(-2, 8);
  opt.label_smoothing = in.chance(160) ? 0 : in.real();
  opt.z_loss = in.chance(160) ? 0 : in.real();
  opt.struct_size = in.chance(245) ? sizeof(opt) : std::size_t(in.bits(16));
  const kflash_cross_entropy_options* options = in.chance(8) ? nullptr : &opt;
  if (!backward) {
    kflash_array loss = call.array(ts, {rows}), mean = call.array(ts, {1});
    if (in.chance(12)) call.alias(loss);
    else call.allocate(loss, true);
    const bool with_mean = in.chance(100);
    if (with_mean) {
      if (in.chance(12)) call.alias(mean);
      else call.allocate(mean, true);
    }
    call.check("kflash_cross_entropy",
               kflash_cross_entropy(memory, &logits, &targets, &loss, with_mean ? &mean : nullptr, options));
  } else {
    kflash_array dloss = call.array(ts, {rows}), dlogits = logits, lse = call.array(ts, {rows});
    call.allocate(dloss, false);
    if (!in_place) {
      dlogits = call.array(t, {rows, vocab});
      if (in.chance(12)) {
        call.alias(dlogits);
        // The logits' own memory: in place when the layouts agree (else refused); either way the
        // logits are the output's memory now.
        if (dlogits.data == logits.data) call.may_write(logits);
      } else {
        call.allocate(dlogits, true);
      }
    }
    const bool with_lse = in.chance(100);
    if (with_lse) call.allocate(lse, false);
    call.check("kflash_cross_entropy_backward", kflash_cross_entropy_backward(memory, &logits, &targets, &dloss, &dlogits,
                                                                              with_lse ? &lse : nullptr, options));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (kflash_initialize() != KFLASH_SUCCESS) {
    std::fprintf(stderr, "kflash_fuzz_c: kflash_initialize: %s\n", kflash_last_error());
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  switch (in.byte() % 5) {
    case 0: fuzz_rows(in); break;
    case 1: fuzz_attention(in); break;
    case 2: fuzz_row_grads(in); break;
    case 3: fuzz_cross_entropy(in); break;
    default: fuzz_merge(in); break;
  }
  return 0;
}
