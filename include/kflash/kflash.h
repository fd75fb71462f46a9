/* kflash's C interface (C99): softmax, log_softmax and logsumexp of rows held in plain arrays.
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

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kflash_status {
  KFLASH_SUCCESS = 0,
  KFLASH_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, extents or strides that do not fit */
  KFLASH_ERROR_NOT_INITIALIZED = 2,  /* Kokkos is not initialized (see kflash_initialize) */
  KFLASH_ERROR_UNSUPPORTED = 3,      /* device memory in a build without a device backend */
  KFLASH_ERROR_INTERNAL = 4          /* anything else; the message says what */
} kflash_status;

typedef enum kflash_memory { KFLASH_MEMORY_HOST = 0, KFLASH_MEMORY_DEVICE = 1 } kflash_memory;

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

#ifdef __cplusplus
}
#endif

#endif /* KFLASH_KFLASH_H */
