/* kflash's C interface (C99): softmax, log_softmax and logsumexp of rows held in plain arrays, and
 * their gradients; cross-entropy and its gradient, attention and its merge on arrays described by
 * kflash_array.
 *
 * Rows: row r of x starts at x + r * x_row_stride and holds `cols` contiguous elements (strides
 * in elements, at least cols when there are two rows or more). A C array x[rows][cols] has
 * x_row_stride = cols; a Fortran array x(cols, rows) too. y may be x (in place, with the same
 * stride).
 *
 * Memory: the caller says where its arrays live. KFLASH_MEMORY_HOST runs on Kokkos's default host
 * execution space (OpenMP when built with it), KFLASH_MEMORY_DEVICE on the default device space of a
 * build with CUDA. Calls return when their results are written.
 *
 * Errors: every call returns a kflash_status. On an error nothing has been written, and
 * kflash_last_error() gives the message (naming the argument and its extents), per thread, until
 * the thread's next kflash call. No call aborts or lets a C++ exception out. */
#ifndef KFLASH_KFLASH_H
#define KFLASH_KFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kflash_status {
  KFLASH_SUCCESS = 0,
  KFLASH_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, extents or strides that do not fit */
  KFLASH_ERROR_NOT_INITIALIZED = 2,  /* Kokkos is not initialized (see kflash_initialize) */
  KFLASH_ERROR_UNSUPPORTED = 3,      /* device memory in a build without a device backend, or a call
                                        from a host thread the Kokkos version cannot launch from
                                        (OpenMP before Kokkos 4.4: only the thread that initialized it) */
  KFLASH_ERROR_INTERNAL = 4          /* anything else; the message says what */
} kflash_status;

/* The enumerations' _RANGE_MIN_ and _RANGE_MAX_ members are no values to pass: they make every int a
 * value of the type in C++ as it is in C, so that the library can refuse a wrong one without
 * reading an out-of-range enumeration (undefined in C++). */
typedef enum kflash_memory {
  KFLASH_MEMORY_HOST = 0,
  KFLASH_MEMORY_DEVICE = 1,
  KFLASH_MEMORY_RANGE_MIN_ = -2147483647 - 1,
  KFLASH_MEMORY_RANGE_MAX_ = 2147483647
} kflash_memory;

/* Initializes Kokkos unless the application already has: both orders work. kflash_finalize
 * finalizes Kokkos only if kflash_initialize initialized it (Kokkos cannot be initialized again
 * after that). */
kflash_status kflash_initialize(void);
kflash_status kflash_finalize(void);

/* The message of this thread's last failed call ("" if none). */
const char* kflash_last_error(void);

/* "0.1.0"; the backends built, such as "Serial, OpenMP"; whether device memory is supported. */
const char* kflash_version(void);
const char* kflash_backends(void);
int kflash_has_device(void);

/* y = softmax or log_softmax of each row of x; out[r] = logsumexp of row r. */
kflash_status kflash_softmax_f32(kflash_memory memory, int64_t rows, int64_t cols, const float* x, int64_t x_row_stride,
                                 float* y, int64_t y_row_stride);
kflash_status kflash_softmax_f64(kflash_memory memory, int64_t rows, int64_t cols, const double* x,
                                 int64_t x_row_stride, double* y, int64_t y_row_stride);
kflash_status kflash_log_softmax_f32(kflash_memory memory, int64_t rows, int64_t cols, const float* x,
                                     int64_t x_row_stride, float* y, int64_t y_row_stride);
kflash_status kflash_log_softmax_f64(kflash_memory memory, int64_t rows, int64_t cols, const double* x,
                                     int64_t x_row_stride, double* y, int64_t y_row_stride);
kflash_status kflash_logsumexp_f32(kflash_memory memory, int64_t rows, int64_t cols, const float* x,
                                   int64_t x_row_stride, float* out);
kflash_status kflash_logsumexp_f64(kflash_memory memory, int64_t rows, int64_t cols, const double* x,
                                   int64_t x_row_stride, double* out);
/* The same on 16-bit rows, given by their bits: bf16 (bfloat16) or f16 (IEEE binary16). Computed in
 * float, each output rounded once to nearest even; logsumexp's out is float. */
kflash_status kflash_softmax_bf16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                  int64_t x_row_stride, uint16_t* y, int64_t y_row_stride);
kflash_status kflash_softmax_f16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                 int64_t x_row_stride, uint16_t* y, int64_t y_row_stride);
kflash_status kflash_log_softmax_bf16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                      int64_t x_row_stride, uint16_t* y, int64_t y_row_stride);
kflash_status kflash_log_softmax_f16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                     int64_t x_row_stride, uint16_t* y, int64_t y_row_stride);
kflash_status kflash_logsumexp_bf16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                    int64_t x_row_stride, float* out);
kflash_status kflash_logsumexp_f16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                   int64_t x_row_stride, float* out);

/* The gradients (rows as above): dx from softmax's or log_softmax's output y and the upstream dy
 * (dx may be dy, with the same stride: in place); logsumexp's from x, lse[rows] as the forward wrote
 * it and the upstream dlse[rows] (dx may be x). As the C++ softmax_backward, log_softmax_backward and
 * logsumexp_backward. */
kflash_status kflash_softmax_backward_f32(kflash_memory memory, int64_t rows, int64_t cols, const float* y,
                                          int64_t y_row_stride, const float* dy, int64_t dy_row_stride, float* dx,
                                          int64_t dx_row_stride);
kflash_status kflash_softmax_backward_f64(kflash_memory memory, int64_t rows, int64_t cols, const double* y,
                                          int64_t y_row_stride, const double* dy, int64_t dy_row_stride, double* dx,
                                          int64_t dx_row_stride);
kflash_status kflash_log_softmax_backward_f32(kflash_memory memory, int64_t rows, int64_t cols, const float* y,
                                              int64_t y_row_stride, const float* dy, int64_t dy_row_stride,
                                              float* dx, int64_t dx_row_stride);
kflash_status kflash_log_softmax_backward_f64(kflash_memory memory, int64_t rows, int64_t cols, const double* y,
                                              int64_t y_row_stride, const double* dy, int64_t dy_row_stride,
                                              double* dx, int64_t dx_row_stride);
kflash_status kflash_logsumexp_backward_f32(kflash_memory memory, int64_t rows, int64_t cols, const float* x,
                                            int64_t x_row_stride, const float* lse, const float* dlse, float* dx,
                                            int64_t dx_row_stride);
kflash_status kflash_logsumexp_backward_f64(kflash_memory memory, int64_t rows, int64_t cols, const double* x,
                                            int64_t x_row_stride, const double* lse, const double* dlse, double* dx,
                                            int64_t dx_row_stride);
/* The same on 16-bit rows (bf16, f16 by their bits; lse and dlse float): computed in float, each
 * element of dx rounded once to nearest even. */
kflash_status kflash_softmax_backward_bf16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* y,
                                           int64_t y_row_stride, const uint16_t* dy, int64_t dy_row_stride,
                                           uint16_t* dx, int64_t dx_row_stride);
kflash_status kflash_softmax_backward_f16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* y,
                                          int64_t y_row_stride, const uint16_t* dy, int64_t dy_row_stride, uint16_t* dx,
                                          int64_t dx_row_stride);
kflash_status kflash_log_softmax_backward_bf16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* y,
                                               int64_t y_row_stride, const uint16_t* dy, int64_t dy_row_stride,
                                               uint16_t* dx, int64_t dx_row_stride);
kflash_status kflash_log_softmax_backward_f16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* y,
                                              int64_t y_row_stride, const uint16_t* dy, int64_t dy_row_stride,
                                              uint16_t* dx, int64_t dx_row_stride);
kflash_status kflash_logsumexp_backward_bf16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                             int64_t x_row_stride, const float* lse, const float* dlse, uint16_t* dx,
                                             int64_t dx_row_stride);
kflash_status kflash_logsumexp_backward_f16(kflash_memory memory, int64_t rows, int64_t cols, const uint16_t* x,
                                            int64_t x_row_stride, const float* lse, const float* dlse, uint16_t* dx,
                                            int64_t dx_row_stride);

/* ---- Attention ------------------------------------------------------------------------------------
 * Arrays are described as DLPack does: data, element type, rank, extents and strides (in elements;
 * all zero: contiguous in row-major order, C's a[e0][e1]..., Fortran's a(e_last, ..., e0)). A
 * kflash_array whose data is NULL is absent: an option left off, or no lse. Input arrays are not
 * written. Index arrays (varlen offsets, paged block table and lengths) are int32 or int64. */

typedef enum kflash_dtype {
  KFLASH_FLOAT32 = 0,
  KFLASH_FLOAT64 = 1,
  KFLASH_BOOL = 2, /* C's _Bool, C++'s bool, Fortran's logical(c_bool) */
  KFLASH_INT32 = 3,
  KFLASH_INT64 = 4,
  /* 16-bit storage (bits as uint16_t) for q, k, v, o of kflash_attention and o_parts, o of
   * kflash_merge_attention; their lse, lse_parts and option arrays are then float32. */
  KFLASH_BFLOAT16 = 5,
  KFLASH_FLOAT16 = 6, /* IEEE binary16 */
  KFLASH_DTYPE_RANGE_MIN_ = -2147483647 - 1,
  KFLASH_DTYPE_RANGE_MAX_ = 2147483647
} kflash_dtype;

#define KFLASH_MAX_RANK 5

typedef struct kflash_array {
  void* data;
  kflash_dtype dtype;
  int rank;
  int64_t extent[KFLASH_MAX_RANK];
  int64_t stride[KFLASH_MAX_RANK];
} kflash_array;

typedef enum kflash_schedule {
  KFLASH_SCHEDULE_AUTOMATIC = 0,
  KFLASH_SCHEDULE_PREFILL = 1,
  KFLASH_SCHEDULE_SPLIT_KV = 2,
  KFLASH_SCHEDULE_RANGE_MIN_ = -2147483647 - 1,
  KFLASH_SCHEDULE_RANGE_MAX_ = 2147483647
} kflash_schedule;

/* attention()'s options, field for field as in the C++ kflash::AttentionOptions (whose comments give
 * their exact meaning). Call kflash_attention_options_init first: it sets the defaults and
 * struct_size, which tells the library how many fields the caller knows of, so that a program built
 * against an older header keeps working when fields are added at the end. */
typedef struct kflash_attention_options {
  size_t struct_size;
  double scale; /* 0: 1 / sqrt(D) */
  int causal;   /* nonzero: bottom-right causal mask */
  int window_left, window_right; /* -1: unbounded */
  double softcap;                /* 0: off */
  kflash_array alibi_slopes;     /* (Hq) or (B, Hq), q's type (float32 for 16-bit q) */
  kflash_array sinks;            /* (Hq), q's type (float32 for 16-bit q) */
  kflash_array bias;             /* (B or 1, Hq or 1, Nq, Nk), q's type (float32 for 16-bit q) */
  kflash_array mask;             /* same shape, KFLASH_BOOL: false hides the pair */
  kflash_array cu_seqlens_q;     /* varlen: (B + 1) offsets; q, k, v, o then have rank 3 */
  kflash_array cu_seqlens_k;
  kflash_array block_table; /* paged KV: (B, max_pages); k, v are then (pages, page_size, Hk, D) */
  kflash_array cache_seqlens; /* paged KV: (B) */
  kflash_schedule schedule;
  int num_splits; /* split_kv's number of key splits, 0: chosen from the shapes */
} kflash_attention_options;

void kflash_attention_options_init(kflash_attention_options* options);

/* o = softmax(scale q k^T) v, as the C++ kflash::attention: q (B, Hq, Nq, D), k (B, Hk, Nk, D),
 * v (B, Hk, Nk, Dv), o (B, Hq, Nq, Dv), lse (B, Hq, Nq) (data NULL, or lse NULL: not wanted); Hq a
 * multiple of Hk (GQA). q, k, v, o and lse have one floating type, float32 or float64; or q, k, v, o
 * are bfloat16 or float16 (one of them) and lse float32. Varlen and paged KV change the ranks as the
 * options' comments say. options NULL: the defaults. */
kflash_status kflash_attention(kflash_memory memory, const kflash_array* q, const kflash_array* k,
                               const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                               const kflash_attention_options* options);

/* The gradients of sum <dout, o> for o = attention(q, k, v, options), as the C++
 * kflash::attention_backward (deterministic: the same bits run to run): o and lse as kflash_attention
 * wrote them (lse required), dout shaped like o; dq like q, dk like k, dv like v (dk and dv summed
 * over each K/V head's group of query heads). dsinks (Hq) and dbias (options->bias's shape) get the
 * gradients of options->sinks and options->bias (NULL or data NULL: not wanted). Every array has q's
 * floating type; with 16-bit q, k, v, o, dout, dq, dk, dv, lse, dsinks and dbias are float32. Paged
 * K/V has no backward (an error). options NULL: the defaults. */
kflash_status kflash_attention_backward(kflash_memory memory, const kflash_array* q, const kflash_array* k,
                                        const kflash_array* v, const kflash_array* o, const kflash_array* lse,
                                        const kflash_array* dout, const kflash_array* dq, const kflash_array* dk,
                                        const kflash_array* dv, const kflash_array* dsinks,
                                        const kflash_array* dbias, const kflash_attention_options* options);

/* Combines results over disjoint key sets: o_parts (S, B, H, N, Dv) and lse_parts (S, B, H, N) give
 * o (B, H, N, Dv) and lse (B, H, N), as the C++ kflash::merge_attention. o_parts and o may be
 * bfloat16 or float16 (lse_parts and lse then float32). */
kflash_status kflash_merge_attention(kflash_memory memory, const kflash_array* o_parts,
                                     const kflash_array* lse_parts, const kflash_array* o,
                                     const kflash_array* lse);

/* ---- Cross-entropy ---------------------------------------------------------------------------------
 * cross_entropy's options, field for field as in the C++ kflash::CrossEntropyOptions. Call
 * kflash_cross_entropy_options_init first (defaults and struct_size, as for the attention options). */
typedef struct kflash_cross_entropy_options {
  size_t struct_size;
  int64_t ignore_index;   /* rows whose target equals it get loss 0 and gradient 0; default -100 */
  double label_smoothing; /* epsilon in [0, 1] */
  double z_loss;          /* coefficient >= 0 of lse^2 added to each row's loss */
} kflash_cross_entropy_options;

void kflash_cross_entropy_options_init(kflash_cross_entropy_options* options);

/* loss (rows) = the cross-entropy of each row of logits (rows, vocabulary) against targets (rows),
 * as the C++ kflash::cross_entropy: logits float32, float64, bfloat16 or float16, loss of the
 * logits' type (float32 for 16-bit logits), targets int32 or int64. mean (1), the loss's type, gets
 * the mean loss over the rows not ignored (NaN if none); NULL or data NULL: not wanted. A target
 * outside [0, vocabulary) that is not ignore_index is an error, and nothing is written. options
 * NULL: the defaults. */
kflash_status kflash_cross_entropy(kflash_memory memory, const kflash_array* logits, const kflash_array* targets,
                                   const kflash_array* loss, const kflash_array* mean,
                                   const kflash_cross_entropy_options* options);

/* dlogits (rows, vocabulary) = dloss[r] times the gradient of row r's loss with respect to its
 * logits, as the C++ kflash::cross_entropy_backward. dlogits may be the logits' own array (in place:
 * the same data and strides). lse (rows), the forward's logsumexp of each row, saves a pass over the
 * logits (NULL or data NULL: computed). dlogits has the logits' type; dloss and lse too, or
 * float32 for 16-bit logits. */
kflash_status kflash_cross_entropy_backward(kflash_memory memory, const kflash_array* logits,
                                            const kflash_array* targets, const kflash_array* dloss,
                                            const kflash_array* dlogits, const kflash_array* lse,
                                            const kflash_cross_entropy_options* options);

#ifdef __cplusplus
}
#endif

#endif /* KFLASH_KFLASH_H */
