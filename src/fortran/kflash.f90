! Module kflash: kflash's Fortran interface, over its C interface (include/kflash/kflash.h).
!
! Arrays are Fortran's (column-major): a row of softmax is the first dimension, and attention's
! q(D, Nq, Hq, B) is kflash's (B, Hq, Nq, D) row-major. Every call takes an optional stat / errmsg
! pair as Fortran's intrinsics do: with stat present a failed call sets it (nonzero) and errmsg, and
! writes nothing; without it a failed call stops the program with the message. Messages give extents
! in kflash's order, the reverse of Fortran's.
module kflash
  use, intrinsic :: iso_c_binding
  implicit none
  private

  public :: kflash_initialize, kflash_finalize, kflash_version, kflash_backends
  public :: kflash_softmax, kflash_log_softmax, kflash_logsumexp, kflash_attention, kflash_merge_attention
  public :: kflash_attention_backward
  public :: kflash_softmax_backward, kflash_log_softmax_backward, kflash_logsumexp_backward
  public :: kflash_attention_options
  public :: kflash_cross_entropy, kflash_cross_entropy_backward, kflash_cross_entropy_options
  public :: KFLASH_SCHEDULE_AUTOMATIC, KFLASH_SCHEDULE_PREFILL, KFLASH_SCHEDULE_SPLIT_KV

  integer, parameter :: KFLASH_SCHEDULE_AUTOMATIC = 0, KFLASH_SCHEDULE_PREFILL = 1, KFLASH_SCHEDULE_SPLIT_KV = 2

  !> attention's options, as kflash::AttentionOptions (whose comments give their meaning). New
  !> options are added as components.
  type :: kflash_attention_options
    real(8) :: scale = 0            ! 0: 1 / sqrt(D)
    logical :: causal = .false.
    integer :: window_left = -1     ! -1: unbounded
    integer :: window_right = -1
    real(8) :: softcap = 0          ! 0: off
    real(8), allocatable :: alibi_slopes(:)  ! (Hq)
    real(8), allocatable :: sinks(:)         ! (Hq)
    integer :: schedule = KFLASH_SCHEDULE_AUTOMATIC
    integer :: num_splits = 0
  end type kflash_attention_options

  !> cross_entropy's options, as kflash::CrossEntropyOptions. Targets are class indices counted from
  !> 0, as in kflash's C and C++ interfaces: logits(1 + t, r) is row r's target logit.
  type :: kflash_cross_entropy_options
    integer(8) :: ignore_index = -100  ! rows whose target equals it get loss 0 and gradient 0
    real(8) :: label_smoothing = 0     ! in [0, 1]
    real(8) :: z_loss = 0              ! coefficient >= 0 of lse**2 added to each row's loss
  end type kflash_cross_entropy_options

  interface kflash_softmax
    module procedure softmax_r4_1, softmax_r4_2, softmax_r8_1, softmax_r8_2
  end interface
  interface kflash_log_softmax
    module procedure log_softmax_r4_1, log_softmax_r4_2, log_softmax_r8_1, log_softmax_r8_2
  end interface
  interface kflash_logsumexp
    module procedure logsumexp_r4_1, logsumexp_r4_2, logsumexp_r8_1, logsumexp_r8_2
  end interface
  interface kflash_softmax_backward
    module procedure softmax_backward_r4_1, softmax_backward_r4_2, softmax_backward_r8_1, softmax_backward_r8_2
  end interface
  interface kflash_log_softmax_backward
    module procedure log_softmax_backward_r4_1, log_softmax_backward_r4_2, log_softmax_backward_r8_1, &
                     log_softmax_backward_r8_2
  end interface
  interface kflash_logsumexp_backward
    module procedure logsumexp_backward_r4_1, logsumexp_backward_r4_2, logsumexp_backward_r8_1, &
                     logsumexp_backward_r8_2
  end interface
  interface kflash_attention
    module procedure attention_r4, attention_r8
  end interface
  interface kflash_attention_backward
    module procedure attention_backward_r4, attention_backward_r8
  end interface
  interface kflash_cross_entropy
    module procedure cross_entropy_r4_i4, cross_entropy_r4_i8, cross_entropy_r8_i4, cross_entropy_r8_i8
  end interface
  interface kflash_cross_entropy_backward
    module procedure cross_entropy_backward_r4_i4, cross_entropy_backward_r4_i8, cross_entropy_backward_r8_i4, &
                     cross_entropy_backward_r8_i8
  end interface
  interface kflash_merge_attention
    module procedure merge_r4, merge_r8
  end interface

  ! ---- The C interface ----
  integer(c_int), parameter :: MEMORY_HOST = 0
  integer(c_int), parameter :: FLOAT32 = 0, FLOAT64 = 1, INT32 = 3, INT64 = 4
  integer, parameter :: OP_SOFTMAX = 1, OP_LOG_SOFTMAX = 2, OP_LOGSUMEXP = 3
  integer(c_int), parameter :: INVALID_ARGUMENT = 1

  type, bind(c) :: c_array
    type(c_ptr) :: data = c_null_ptr
    integer(c_int) :: dtype = 0
    integer(c_int) :: rank = 0
    integer(c_int64_t) :: extent(5) = 0
    integer(c_int64_t) :: stride(5) = 0
  end type c_array

  type, bind(c) :: c_attention_options
    integer(c_size_t) :: struct_size
    real(c_double) :: scale
    integer(c_int) :: causal, window_left, window_right
    real(c_double) :: softcap
    type(c_array) :: alibi_slopes, sinks, bias, mask, cu_seqlens_q, cu_seqlens_k, block_table, cache_seqlens
    integer(c_int) :: schedule, num_splits
  end type c_attention_options

  type, bind(c) :: c_cross_entropy_options
    integer(c_size_t) :: struct_size
    integer(c_int64_t) :: ignore_index
    real(c_double) :: label_smoothing, z_loss
  end type c_cross_entropy_options

  interface
    integer(c_int) function c_initialize() bind(c, name="kflash_initialize")
      import :: c_int
    end function
    integer(c_int) function c_finalize() bind(c, name="kflash_finalize")
      import :: c_int
    end function
    type(c_ptr) function c_last_error() bind(c, name="kflash_last_error")
      import :: c_ptr
    end function
    type(c_ptr) function c_version() bind(c, name="kflash_version")
      import :: c_ptr
    end function
    type(c_ptr) function c_backends() bind(c, name="kflash_backends")
      import :: c_ptr
    end function
    subroutine c_options_init(options) bind(c, name="kflash_attention_options_init")
      import :: c_attention_options
      type(c_attention_options), intent(out) :: options
    end subroutine
    integer(c_int) function c_attention(memory, q, k, v, o, lse, options) bind(c, name="kflash_attention")
      import :: c_int, c_array, c_attention_options, c_ptr
      integer(c_int), value :: memory
      type(c_array), intent(in) :: q, k, v, o
      type(c_ptr), value :: lse
      type(c_attention_options), intent(in) :: options
    end function
    integer(c_int) function c_attention_backward(memory, q, k, v, o, lse, dout, dq, dk, dv, dsinks, dbias, options) &
        bind(c, name="kflash_attention_backward")
      import :: c_int, c_array, c_attention_options, c_ptr
      integer(c_int), value :: memory
      type(c_array), intent(in) :: q, k, v, o, lse, dout, dq, dk, dv
      type(c_ptr), value :: dsinks, dbias
      type(c_attention_options), intent(in) :: options
    end function
    integer(c_int) function c_merge(memory, o_parts, lse_parts, o, lse) bind(c, name="kflash_merge_attention")
      import :: c_int, c_array
      integer(c_int), value :: memory
      type(c_array), intent(in) :: o_parts, lse_parts, o, lse
    end function
    subroutine c_ce_options_init(options) bind(c, name="kflash_cross_entropy_options_init")
      import :: c_cross_entropy_options
      type(c_cross_entropy_options), intent(out) :: options
    end subroutine
    integer(c_int) function c_cross_entropy(memory, logits, targets, loss, mean, options) &
        bind(c, name="kflash_cross_entropy")
      import :: c_int, c_array, c_cross_entropy_options, c_ptr
      integer(c_int), value :: memory
      type(c_array), intent(in) :: logits, targets, loss
      type(c_ptr), value :: mean
      type(c_cross_entropy_options), intent(in) :: options
    end function
    integer(c_int) function c_cross_entropy_backward(memory, logits, targets, dloss, dlogits, lse, options) &
        bind(c, name="kflash_cross_entropy_backward")
      import :: c_int, c_array, c_cross_entropy_options, c_ptr
      integer(c_int), value :: memory
      type(c_array), intent(in) :: logits, targets, dloss, dlogits
      type(c_ptr), value :: lse
      type(c_cross_entropy_options), intent(in) :: options
    end function
  end interface

  ! The C functions the row calls reach, by operation and dtype.
  interface
    integer(c_int) function c_softmax_f32(memory, rows, cols, x, xs, y, ys) bind(c, name="kflash_softmax_f32")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs, ys
      type(c_ptr), value :: x, y
    end function
    integer(c_int) function c_softmax_f64(memory, rows, cols, x, xs, y, ys) bind(c, name="kflash_softmax_f64")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs, ys
      type(c_ptr), value :: x, y
    end function
    integer(c_int) function c_log_softmax_f32(memory, rows, cols, x, xs, y, ys) bind(c, name="kflash_log_softmax_f32")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs, ys
      type(c_ptr), value :: x, y
    end function
    integer(c_int) function c_log_softmax_f64(memory, rows, cols, x, xs, y, ys) bind(c, name="kflash_log_softmax_f64")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs, ys
      type(c_ptr), value :: x, y
    end function
    integer(c_int) function c_logsumexp_f32(memory, rows, cols, x, xs, out) bind(c, name="kflash_logsumexp_f32")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs
      type(c_ptr), value :: x, out
    end function
    integer(c_int) function c_logsumexp_f64(memory, rows, cols, x, xs, out) bind(c, name="kflash_logsumexp_f64")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs
      type(c_ptr), value :: x, out
    end function
  end interface

  ! The C functions of the row gradients, by operation and dtype.
  interface
    integer(c_int) function c_softmax_backward_f32(memory, rows, cols, y, ys, dy, dys, dx, dxs) &
        bind(c, name="kflash_softmax_backward_f32")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, ys, dys, dxs
      type(c_ptr), value :: y, dy, dx
    end function
    integer(c_int) function c_softmax_backward_f64(memory, rows, cols, y, ys, dy, dys, dx, dxs) &
        bind(c, name="kflash_softmax_backward_f64")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, ys, dys, dxs
      type(c_ptr), value :: y, dy, dx
    end function
    integer(c_int) function c_log_softmax_backward_f32(memory, rows, cols, y, ys, dy, dys, dx, dxs) &
        bind(c, name="kflash_log_softmax_backward_f32")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, ys, dys, dxs
      type(c_ptr), value :: y, dy, dx
    end function
    integer(c_int) function c_log_softmax_backward_f64(memory, rows, cols, y, ys, dy, dys, dx, dxs) &
        bind(c, name="kflash_log_softmax_backward_f64")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, ys, dys, dxs
      type(c_ptr), value :: y, dy, dx
    end function
    integer(c_int) function c_logsumexp_backward_f32(memory, rows, cols, x, xs, lse, dlse, dx, dxs) &
        bind(c, name="kflash_logsumexp_backward_f32")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs, dxs
      type(c_ptr), value :: x, lse, dlse, dx
    end function
    integer(c_int) function c_logsumexp_backward_f64(memory, rows, cols, x, xs, lse, dlse, dx, dxs) &
        bind(c, name="kflash_logsumexp_backward_f64")
      import :: c_int, c_int64_t, c_ptr
      integer(c_int), value :: memory
      integer(c_int64_t), value :: rows, cols, xs, dxs
      type(c_ptr), value :: x, lse, dlse, dx
    end function
  end interface

contains

  ! ---- Set-up and errors ----

  !> Initializes Kokkos unless the application already has (kflash_finalize then leaves it).
  subroutine kflash_initialize(stat, errmsg)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call finish(c_initialize(), "", stat, errmsg)
  end subroutine

  subroutine kflash_finalize(stat, errmsg)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call finish(c_finalize(), "", stat, errmsg)
  end subroutine

  function kflash_version() result(s)
    character(:), allocatable :: s
    s = c_string(c_version())
  end function

  function kflash_backends() result(s)
    character(:), allocatable :: s
    s = c_string(c_backends())
  end function

  function c_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n
    interface
      integer(c_size_t) function strlen(str) bind(c, name="strlen")
        import :: c_size_t, c_ptr
        type(c_ptr), value :: str
      end function
    end interface
    n = int(strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(n) :: s)
    s = transfer(chars(1:n), s)
  end function

  !> Reports a call's status: stat and errmsg when present; otherwise a failure stops the program.
  !> A nonempty `message` is the wrapper's own (the C interface was not called).
  subroutine finish(status, message, stat, errmsg)
    integer(c_int), intent(in) :: status
    character(*), intent(in) :: message
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    character(:), allocatable :: text
    if (present(stat)) stat = int(status)
    if (status == 0) return
    if (len(message) > 0) then
      text = message
    else
      text = c_string(c_last_error())
    end if
    if (present(errmsg)) errmsg = text
    if (.not. present(stat)) error stop text
  end subroutine

  !> The address of an array's first element (null when it has none).
  function address(p, n) result(a)
    type(c_ptr), intent(in) :: p
    integer(c_int64_t), intent(in) :: n
    type(c_ptr) :: a
    a = c_null_ptr
    if (n > 0) a = p
  end function

  ! ---- Rows ----

  !> One row call on x(cols, rows) into y (the same shape) or out(rows).
  subroutine rows_call(op, dtype, x, x_shape, y, y_shape, stat, errmsg)
    integer, intent(in) :: op
    integer(c_int), intent(in) :: dtype
    type(c_ptr), intent(in) :: x, y
    integer, intent(in) :: x_shape(2), y_shape(2)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    integer(c_int64_t) :: cols, rows
    integer(c_int) :: status
    character(160) :: message
    cols = x_shape(1)
    rows = x_shape(2)
    if (any(x_shape /= y_shape)) then
      if (op == OP_LOGSUMEXP) then
        write (message, '(a, i0, a, i0, a, i0, a, i0, a)') 'kflash_logsumexp: out has ', y_shape(2), &
          ' elements, but x (', cols, ', ', rows, ') has ', rows, ' rows'
      else
        write (message, '(a, a, i0, a, i0, a, i0, a, i0, a)') trim(merge('kflash_softmax    ', 'kflash_log_softmax', &
          op == OP_SOFTMAX)), ': y (', y_shape(1), ', ', y_shape(2), ') must have the shape of x (', cols, ', ', rows, ')'
      end if
      call finish(INVALID_ARGUMENT, trim(message), stat, errmsg)
      return
    end if
    select case (op * 2 + dtype)
    case (OP_SOFTMAX * 2 + FLOAT32)
      status = c_softmax_f32(MEMORY_HOST, rows, cols, address(x, rows * cols), cols, address(y, rows * cols), cols)
    case (OP_SOFTMAX * 2 + FLOAT64)
      status = c_softmax_f64(MEMORY_HOST, rows, cols, address(x, rows * cols), cols, address(y, rows * cols), cols)
    case (OP_LOG_SOFTMAX * 2 + FLOAT32)
      status = c_log_softmax_f32(MEMORY_HOST, rows, cols, address(x, rows * cols), cols, address(y, rows * cols), cols)
    case (OP_LOG_SOFTMAX * 2 + FLOAT64)
      status = c_log_softmax_f64(MEMORY_HOST, rows, cols, address(x, rows * cols), cols, address(y, rows * cols), cols)
    case (OP_LOGSUMEXP * 2 + FLOAT32)
      status = c_logsumexp_f32(MEMORY_HOST, rows, cols, address(x, rows * cols), cols, address(y, rows))
    case default
      status = c_logsumexp_f64(MEMORY_HOST, rows, cols, address(x, rows * cols), cols, address(y, rows))
    end select
    call finish(status, "", stat, errmsg)
  end subroutine

  ! Each specific procedure names its array's address and shape; rows_call does the rest.
  subroutine softmax_r4_1(x, y, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:)
    real(c_float), intent(inout), target, contiguous :: y(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_SOFTMAX, FLOAT32, c_loc(x), [size(x), 1], c_loc(y), [size(y), 1], stat, errmsg)
  end subroutine
  subroutine softmax_r4_2(x, y, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:, :)
    real(c_float), intent(inout), target, contiguous :: y(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_SOFTMAX, FLOAT32, c_loc(x), shape(x), c_loc(y), shape(y), stat, errmsg)
  end subroutine
  subroutine softmax_r8_1(x, y, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:)
    real(c_double), intent(inout), target, contiguous :: y(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_SOFTMAX, FLOAT64, c_loc(x), [size(x), 1], c_loc(y), [size(y), 1], stat, errmsg)
  end subroutine
  subroutine softmax_r8_2(x, y, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:, :)
    real(c_double), intent(inout), target, contiguous :: y(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_SOFTMAX, FLOAT64, c_loc(x), shape(x), c_loc(y), shape(y), stat, errmsg)
  end subroutine

  subroutine log_softmax_r4_1(x, y, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:)
    real(c_float), intent(inout), target, contiguous :: y(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOG_SOFTMAX, FLOAT32, c_loc(x), [size(x), 1], c_loc(y), [size(y), 1], stat, errmsg)
  end subroutine
  subroutine log_softmax_r4_2(x, y, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:, :)
    real(c_float), intent(inout), target, contiguous :: y(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOG_SOFTMAX, FLOAT32, c_loc(x), shape(x), c_loc(y), shape(y), stat, errmsg)
  end subroutine
  subroutine log_softmax_r8_1(x, y, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:)
    real(c_double), intent(inout), target, contiguous :: y(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOG_SOFTMAX, FLOAT64, c_loc(x), [size(x), 1], c_loc(y), [size(y), 1], stat, errmsg)
  end subroutine
  subroutine log_softmax_r8_2(x, y, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:, :)
    real(c_double), intent(inout), target, contiguous :: y(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOG_SOFTMAX, FLOAT64, c_loc(x), shape(x), c_loc(y), shape(y), stat, errmsg)
  end subroutine

  ! logsumexp: out(rows) for x(cols, rows); a scalar for a rank-1 x.
  subroutine logsumexp_r4_1(x, out, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:)
    real(c_float), intent(inout), target :: out
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOGSUMEXP, FLOAT32, c_loc(x), [size(x), 1], c_loc(out), [size(x), 1], stat, errmsg)
  end subroutine
  subroutine logsumexp_r4_2(x, out, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:, :)
    real(c_float), intent(inout), target, contiguous :: out(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOGSUMEXP, FLOAT32, c_loc(x), shape(x), c_loc(out), [size(x, 1), size(out)], stat, errmsg)
  end subroutine
  subroutine logsumexp_r8_1(x, out, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:)
    real(c_double), intent(inout), target :: out
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOGSUMEXP, FLOAT64, c_loc(x), [size(x), 1], c_loc(out), [size(x), 1], stat, errmsg)
  end subroutine
  subroutine logsumexp_r8_2(x, out, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:, :)
    real(c_double), intent(inout), target, contiguous :: out(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call rows_call(OP_LOGSUMEXP, FLOAT64, c_loc(x), shape(x), c_loc(out), [size(x, 1), size(out)], stat, errmsg)
  end subroutine

  ! ---- Row gradients ----

  !> One gradient call: softmax and log_softmax from y(cols, rows) and dy (a, b), logsumexp from
  !> x(cols, rows) (a), lse and dlse (n_lse elements each); dx has a's shape.
  subroutine grad_call(op, dtype, a, a_shape, b, b_shape, lse, dlse, n_lse, dx, dx_shape, stat, errmsg)
    integer, intent(in) :: op, n_lse
    integer(c_int), intent(in) :: dtype
    type(c_ptr), intent(in) :: a, b, lse, dlse, dx
    integer, intent(in) :: a_shape(2), b_shape(2), dx_shape(2)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    integer(c_int64_t) :: cols, rows, n
    integer(c_int) :: status
    character(160) :: message
    character(:), allocatable :: fn
    cols = a_shape(1)
    rows = a_shape(2)
    n = rows * cols
    fn = trim(merge('kflash_softmax_backward    ', 'kflash_log_softmax_backward', op == OP_SOFTMAX))
    if (op == OP_LOGSUMEXP) fn = 'kflash_logsumexp_backward'
    message = ''
    ! Shapes as the caller wrote them (Fortran's order), as rows_call's messages.
    if (op == OP_LOGSUMEXP .and. n_lse /= rows) then
      write (message, '(a, a, i0, a, i0, a, i0, a, i0, a)') fn, ': lse has ', n_lse, ' elements, but x (', &
        cols, ', ', rows, ') has ', rows, ' rows'
    else if (any(b_shape /= a_shape)) then
      write (message, '(a, a, i0, a, i0, a, i0, a, i0, a)') fn, ': dy (', b_shape(1), ', ', b_shape(2), &
        ') must have the shape of y (', cols, ', ', rows, ')'
    else if (any(dx_shape /= a_shape)) then
      write (message, '(a, a, i0, a, i0, a, a, a, i0, a, i0, a)') fn, ': dx (', dx_shape(1), ', ', dx_shape(2), &
        ') must have the shape of ', merge('x', 'y', op == OP_LOGSUMEXP), ' (', cols, ', ', rows, ')'
    end if
    if (len_trim(message) > 0) then
      call finish(INVALID_ARGUMENT, trim(message), stat, errmsg)
      return
    end if
    select case (op * 2 + dtype)
    case (OP_SOFTMAX * 2 + FLOAT32)
      status = c_softmax_backward_f32(MEMORY_HOST, rows, cols, address(a, n), cols, address(b, n), cols, &
                                      address(dx, n), cols)
    case (OP_SOFTMAX * 2 + FLOAT64)
      status = c_softmax_backward_f64(MEMORY_HOST, rows, cols, address(a, n), cols, address(b, n), cols, &
                                      address(dx, n), cols)
    case (OP_LOG_SOFTMAX * 2 + FLOAT32)
      status = c_log_softmax_backward_f32(MEMORY_HOST, rows, cols, address(a, n), cols, address(b, n), cols, &
                                          address(dx, n), cols)
    case (OP_LOG_SOFTMAX * 2 + FLOAT64)
      status = c_log_softmax_backward_f64(MEMORY_HOST, rows, cols, address(a, n), cols, address(b, n), cols, &
                                          address(dx, n), cols)
    case (OP_LOGSUMEXP * 2 + FLOAT32)
      status = c_logsumexp_backward_f32(MEMORY_HOST, rows, cols, address(a, n), cols, address(lse, rows), &
                                        address(dlse, rows), address(dx, n), cols)
    case default
      status = c_logsumexp_backward_f64(MEMORY_HOST, rows, cols, address(a, n), cols, address(lse, rows), &
                                        address(dlse, rows), address(dx, n), cols)
    end select
    call finish(status, "", stat, errmsg)
  end subroutine

  ! softmax_backward and log_softmax_backward: dx from y and dy (dx may be dy: in place).
  subroutine softmax_backward_r4_1(y, dy, dx, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: y(:)
    real(c_float), intent(inout), target, contiguous :: dy(:), dx(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_SOFTMAX, FLOAT32, c_loc(y), [size(y), 1], c_loc(dy), [size(dy), 1], c_null_ptr, c_null_ptr, 1, &
                   c_loc(dx), [size(dx), 1], stat, errmsg)
  end subroutine
  subroutine softmax_backward_r4_2(y, dy, dx, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: y(:, :)
    real(c_float), intent(inout), target, contiguous :: dy(:, :), dx(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_SOFTMAX, FLOAT32, c_loc(y), shape(y), c_loc(dy), shape(dy), c_null_ptr, c_null_ptr, size(y, 2), &
                   c_loc(dx), shape(dx), stat, errmsg)
  end subroutine
  subroutine softmax_backward_r8_1(y, dy, dx, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: y(:)
    real(c_double), intent(inout), target, contiguous :: dy(:), dx(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_SOFTMAX, FLOAT64, c_loc(y), [size(y), 1], c_loc(dy), [size(dy), 1], c_null_ptr, c_null_ptr, 1, &
                   c_loc(dx), [size(dx), 1], stat, errmsg)
  end subroutine
  subroutine softmax_backward_r8_2(y, dy, dx, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: y(:, :)
    real(c_double), intent(inout), target, contiguous :: dy(:, :), dx(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_SOFTMAX, FLOAT64, c_loc(y), shape(y), c_loc(dy), shape(dy), c_null_ptr, c_null_ptr, size(y, 2), &
                   c_loc(dx), shape(dx), stat, errmsg)
  end subroutine
  subroutine log_softmax_backward_r4_1(y, dy, dx, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: y(:)
    real(c_float), intent(inout), target, contiguous :: dy(:), dx(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_LOG_SOFTMAX, FLOAT32, c_loc(y), [size(y), 1], c_loc(dy), [size(dy), 1], c_null_ptr, c_null_ptr, 1, &
                   c_loc(dx), [size(dx), 1], stat, errmsg)
  end subroutine
  subroutine log_softmax_backward_r4_2(y, dy, dx, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: y(:, :)
    real(c_float), intent(inout), target, contiguous :: dy(:, :), dx(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_LOG_SOFTMAX, FLOAT32, c_loc(y), shape(y), c_loc(dy), shape(dy), c_null_ptr, c_null_ptr, size(y, 2), &
                   c_loc(dx), shape(dx), stat, errmsg)
  end subroutine
  subroutine log_softmax_backward_r8_1(y, dy, dx, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: y(:)
    real(c_double), intent(inout), target, contiguous :: dy(:), dx(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_LOG_SOFTMAX, FLOAT64, c_loc(y), [size(y), 1], c_loc(dy), [size(dy), 1], c_null_ptr, c_null_ptr, 1, &
                   c_loc(dx), [size(dx), 1], stat, errmsg)
  end subroutine
  subroutine log_softmax_backward_r8_2(y, dy, dx, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: y(:, :)
    real(c_double), intent(inout), target, contiguous :: dy(:, :), dx(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_LOG_SOFTMAX, FLOAT64, c_loc(y), shape(y), c_loc(dy), shape(dy), c_null_ptr, c_null_ptr, size(y, 2), &
                   c_loc(dx), shape(dx), stat, errmsg)
  end subroutine

  ! logsumexp_backward: dx from x, lse and dlse (scalars for a rank-1 x; dx may be x).
  subroutine logsumexp_backward_r4_1(x, lse, dlse, dx, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:)
    real(c_float), intent(in), target :: lse, dlse
    real(c_float), intent(inout), target, contiguous :: dx(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_LOGSUMEXP, FLOAT32, c_loc(x), [size(x), 1], c_null_ptr, [size(x), 1], c_loc(lse), c_loc(dlse), 1, &
                   c_loc(dx), [size(dx), 1], stat, errmsg)
  end subroutine
  subroutine logsumexp_backward_r4_2(x, lse, dlse, dx, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: x(:, :), lse(:), dlse(:)
    real(c_float), intent(inout), target, contiguous :: dx(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    if (size(dlse) /= size(lse)) then
      call finish(INVALID_ARGUMENT, 'kflash_logsumexp_backward: dlse must have the size of lse', stat, errmsg)
      return
    end if
    call grad_call(OP_LOGSUMEXP, FLOAT32, c_loc(x), shape(x), c_null_ptr, shape(x), c_loc(lse), c_loc(dlse), size(lse), &
                   c_loc(dx), shape(dx), stat, errmsg)
  end subroutine
  subroutine logsumexp_backward_r8_1(x, lse, dlse, dx, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:)
    real(c_double), intent(in), target :: lse, dlse
    real(c_double), intent(inout), target, contiguous :: dx(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call grad_call(OP_LOGSUMEXP, FLOAT64, c_loc(x), [size(x), 1], c_null_ptr, [size(x), 1], c_loc(lse), c_loc(dlse), 1, &
                   c_loc(dx), [size(dx), 1], stat, errmsg)
  end subroutine
  subroutine logsumexp_backward_r8_2(x, lse, dlse, dx, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: x(:, :), lse(:), dlse(:)
    real(c_double), intent(inout), target, contiguous :: dx(:, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    if (size(dlse) /= size(lse)) then
      call finish(INVALID_ARGUMENT, 'kflash_logsumexp_backward: dlse must have the size of lse', stat, errmsg)
      return
    end if
    call grad_call(OP_LOGSUMEXP, FLOAT64, c_loc(x), shape(x), c_null_ptr, shape(x), c_loc(lse), c_loc(dlse), size(lse), &
                   c_loc(dx), shape(dx), stat, errmsg)
  end subroutine

  ! ---- Attention ----

  !> The C descriptor of a Fortran array a(e1, ..., en): kflash's (en, ..., e1), contiguous.
  function described(p, dtype, fortran_shape) result(a)
    type(c_ptr), intent(in) :: p
    integer(c_int), intent(in) :: dtype
    integer, intent(in) :: fortran_shape(:)
    type(c_array) :: a
    integer :: n, d
    n = size(fortran_shape)
    a%data = address(p, product(int(fortran_shape, c_int64_t)))
    a%dtype = dtype
    a%rank = n
    do d = 1, n
      a%extent(d) = fortran_shape(n + 1 - d)
    end do
  end function

  !> attention on described arrays, or with dout, dq, dk, dv and dsinks (data null: not wanted) its
  !> backward; the options' real(8) arrays are converted to the call's type.
  subroutine attention_call(dtype, q, k, v, o, lse, has_lse, opts, stat, errmsg, dout, dq, dk, dv, dsinks)
    integer(c_int), intent(in) :: dtype
    type(c_array), intent(in) :: q, k, v, o, lse
    logical, intent(in) :: has_lse
    type(kflash_attention_options), intent(in) :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array), intent(in), optional :: dout, dq, dk, dv
    type(c_array), intent(in), optional, target :: dsinks
    type(c_attention_options) :: c
    type(c_ptr) :: dsinks_ptr
    type(c_array), target :: lse_copy
    real(c_float), allocatable, target :: alibi4(:), sinks4(:)
    real(c_double), allocatable, target :: alibi8(:), sinks8(:)
    type(c_ptr) :: lse_ptr
    call c_options_init(c)
    c%scale = opts%scale
    c%causal = merge(1, 0, opts%causal)
    c%window_left = opts%window_left
    c%window_right = opts%window_right
    c%softcap = opts%softcap
    c%schedule = opts%schedule
    c%num_splits = opts%num_splits
    if (allocated(opts%alibi_slopes)) then
      if (dtype == FLOAT32) then
        alibi4 = real(opts%alibi_slopes, c_float)
        c%alibi_slopes = described(c_loc(alibi4), dtype, shape(alibi4))
      else
        alibi8 = opts%alibi_slopes
        c%alibi_slopes = described(c_loc(alibi8), dtype, shape(alibi8))
      end if
    end if
    if (allocated(opts%sinks)) then
      if (dtype == FLOAT32) then
        sinks4 = real(opts%sinks, c_float)
        c%sinks = described(c_loc(sinks4), dtype, shape(sinks4))
      else
        sinks8 = opts%sinks
        c%sinks = described(c_loc(sinks8), dtype, shape(sinks8))
      end if
    end if
    if (present(dout)) then
      dsinks_ptr = c_null_ptr
      if (c_associated(dsinks%data)) dsinks_ptr = c_loc(dsinks)
      call finish(c_attention_backward(MEMORY_HOST, q, k, v, o, lse, dout, dq, dk, dv, dsinks_ptr, c_null_ptr, c), &
                  "", stat, errmsg)
      return
    end if
    lse_ptr = c_null_ptr
    if (has_lse) then
      lse_copy = lse
      lse_ptr = c_loc(lse_copy)
    end if
    call finish(c_attention(MEMORY_HOST, q, k, v, o, lse_ptr, c), "", stat, errmsg)
  end subroutine

  !> o = softmax(scale q k^T) v: q(D, Nq, Hq, B), k(D, Nk, Hk, B), v(Dv, Nk, Hk, B), o(Dv, Nq, Hq, B),
  !> lse(Nq, Hq, B); Hq a multiple of Hk (GQA).
  subroutine attention_r4(q, k, v, o, opts, lse, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: q(:, :, :, :), k(:, :, :, :), v(:, :, :, :)
    real(c_float), intent(inout), target, contiguous :: o(:, :, :, :)
    type(kflash_attention_options), intent(in) :: opts
    real(c_float), intent(inout), target, contiguous, optional :: lse(:, :, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: l
    if (present(lse)) l = described(c_loc(lse), FLOAT32, shape(lse))
    call attention_call(FLOAT32, described(c_loc(q), FLOAT32, shape(q)), described(c_loc(k), FLOAT32, shape(k)), &
                        described(c_loc(v), FLOAT32, shape(v)), described(c_loc(o), FLOAT32, shape(o)), l, &
                        present(lse), opts, stat, errmsg)
  end subroutine
  subroutine attention_r8(q, k, v, o, opts, lse, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: q(:, :, :, :), k(:, :, :, :), v(:, :, :, :)
    real(c_double), intent(inout), target, contiguous :: o(:, :, :, :)
    type(kflash_attention_options), intent(in) :: opts
    real(c_double), intent(inout), target, contiguous, optional :: lse(:, :, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: l
    if (present(lse)) l = described(c_loc(lse), FLOAT64, shape(lse))
    call attention_call(FLOAT64, described(c_loc(q), FLOAT64, shape(q)), described(c_loc(k), FLOAT64, shape(k)), &
                        described(c_loc(v), FLOAT64, shape(v)), described(c_loc(o), FLOAT64, shape(o)), l, &
                        present(lse), opts, stat, errmsg)
  end subroutine

  !> The gradients of sum(dout * o) for o = attention(q, k, v, opts) with respect to q, k and v, as
  !> the C++ kflash::attention_backward (deterministic): o and lse as kflash_attention wrote them,
  !> dout shaped like o, dq like q, dk like k, dv like v (dk and dv summed over each K/V head's group
  !> of query heads); dsinks(Hq), when present, the gradient of opts%sinks.
  subroutine attention_backward_r4(q, k, v, o, lse, dout, dq, dk, dv, opts, dsinks, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: q(:, :, :, :), k(:, :, :, :), v(:, :, :, :), o(:, :, :, :)
    real(c_float), intent(in), target, contiguous :: lse(:, :, :), dout(:, :, :, :)
    real(c_float), intent(inout), target, contiguous :: dq(:, :, :, :), dk(:, :, :, :), dv(:, :, :, :)
    type(kflash_attention_options), intent(in) :: opts
    real(c_float), intent(inout), target, contiguous, optional :: dsinks(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: ds
    if (present(dsinks)) ds = described(c_loc(dsinks), FLOAT32, shape(dsinks))
    call attention_call(FLOAT32, described(c_loc(q), FLOAT32, shape(q)), described(c_loc(k), FLOAT32, shape(k)), &
                        described(c_loc(v), FLOAT32, shape(v)), described(c_loc(o), FLOAT32, shape(o)), &
                        described(c_loc(lse), FLOAT32, shape(lse)), .true., opts, stat, errmsg, &
                        described(c_loc(dout), FLOAT32, shape(dout)), described(c_loc(dq), FLOAT32, shape(dq)), &
                        described(c_loc(dk), FLOAT32, shape(dk)), described(c_loc(dv), FLOAT32, shape(dv)), ds)
  end subroutine
  subroutine attention_backward_r8(q, k, v, o, lse, dout, dq, dk, dv, opts, dsinks, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: q(:, :, :, :), k(:, :, :, :), v(:, :, :, :), o(:, :, :, :)
    real(c_double), intent(in), target, contiguous :: lse(:, :, :), dout(:, :, :, :)
    real(c_double), intent(inout), target, contiguous :: dq(:, :, :, :), dk(:, :, :, :), dv(:, :, :, :)
    type(kflash_attention_options), intent(in) :: opts
    real(c_double), intent(inout), target, contiguous, optional :: dsinks(:)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: ds
    if (present(dsinks)) ds = described(c_loc(dsinks), FLOAT64, shape(dsinks))
    call attention_call(FLOAT64, described(c_loc(q), FLOAT64, shape(q)), described(c_loc(k), FLOAT64, shape(k)), &
                        described(c_loc(v), FLOAT64, shape(v)), described(c_loc(o), FLOAT64, shape(o)), &
                        described(c_loc(lse), FLOAT64, shape(lse)), .true., opts, stat, errmsg, &
                        described(c_loc(dout), FLOAT64, shape(dout)), described(c_loc(dq), FLOAT64, shape(dq)), &
                        described(c_loc(dk), FLOAT64, shape(dk)), described(c_loc(dv), FLOAT64, shape(dv)), ds)
  end subroutine

  !> Combines results over disjoint key sets: o_parts(Dv, N, H, B, S), lse_parts(N, H, B, S) give
  !> o(Dv, N, H, B) and lse(N, H, B).
  subroutine merge_r4(o_parts, lse_parts, o, lse, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: o_parts(:, :, :, :, :), lse_parts(:, :, :, :)
    real(c_float), intent(inout), target, contiguous :: o(:, :, :, :), lse(:, :, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call finish(c_merge(MEMORY_HOST, described(c_loc(o_parts), FLOAT32, shape(o_parts)), &
                        described(c_loc(lse_parts), FLOAT32, shape(lse_parts)), &
                        described(c_loc(o), FLOAT32, shape(o)), described(c_loc(lse), FLOAT32, shape(lse))), &
                "", stat, errmsg)
  end subroutine
  subroutine merge_r8(o_parts, lse_parts, o, lse, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: o_parts(:, :, :, :, :), lse_parts(:, :, :, :)
    real(c_double), intent(inout), target, contiguous :: o(:, :, :, :), lse(:, :, :)
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    call finish(c_merge(MEMORY_HOST, described(c_loc(o_parts), FLOAT64, shape(o_parts)), &
                        described(c_loc(lse_parts), FLOAT64, shape(lse_parts)), &
                        described(c_loc(o), FLOAT64, shape(o)), described(c_loc(lse), FLOAT64, shape(lse))), &
                "", stat, errmsg)
  end subroutine

  ! ---- Cross-entropy ----

  !> The C options of opts (the defaults where absent).
  function ce_options(opts) result(c)
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    type(c_cross_entropy_options) :: c
    call c_ce_options_init(c)
    if (.not. present(opts)) return
    c%ignore_index = opts%ignore_index
    c%label_smoothing = opts%label_smoothing
    c%z_loss = opts%z_loss
  end function

  !> cross_entropy on described arrays; mean_ptr: a scalar of the logits' type, or null.
  subroutine cross_entropy_call(logits, targets, loss, mean_ptr, opts, stat, errmsg)
    type(c_array), intent(in) :: logits, targets, loss
    type(c_ptr), intent(in) :: mean_ptr
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array), target :: mean
    type(c_ptr) :: m
    m = c_null_ptr
    if (c_associated(mean_ptr)) then
      mean%data = mean_ptr
      mean%dtype = logits%dtype
      mean%rank = 1
      mean%extent(1) = 1
      m = c_loc(mean)
    end if
    call finish(c_cross_entropy(MEMORY_HOST, logits, targets, loss, m, ce_options(opts)), "", stat, errmsg)
  end subroutine

  !> cross_entropy_backward on described arrays; lse: the forward's, or data null.
  subroutine cross_entropy_backward_call(logits, targets, dloss, dlogits, lse, opts, stat, errmsg)
    type(c_array), intent(in) :: logits, targets, dloss, dlogits
    type(c_array), intent(in), target :: lse
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_ptr) :: l
    l = c_null_ptr
    if (c_associated(lse%data)) l = c_loc(lse)
    call finish(c_cross_entropy_backward(MEMORY_HOST, logits, targets, dloss, dlogits, l, ce_options(opts)), "", &
                stat, errmsg)
  end subroutine

  !> loss(r) = the cross-entropy of logits(:, r) (a row of V classes) against class targets(r)
  !> (from 0); mean, when present, the mean loss over the rows not ignored.
  subroutine cross_entropy_r4_i4(logits, targets, loss, mean, opts, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: logits(:, :)
    integer(c_int32_t), intent(in), target, contiguous :: targets(:)
    real(c_float), intent(inout), target, contiguous :: loss(:)
    real(c_float), intent(inout), target, optional :: mean
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_ptr) :: m
    m = c_null_ptr
    if (present(mean)) m = c_loc(mean)
    call cross_entropy_call(described(c_loc(logits), FLOAT32, shape(logits)), &
                            described(c_loc(targets), INT32, shape(targets)), &
                            described(c_loc(loss), FLOAT32, shape(loss)), m, opts, stat, errmsg)
  end subroutine
  subroutine cross_entropy_r4_i8(logits, targets, loss, mean, opts, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: logits(:, :)
    integer(c_int64_t), intent(in), target, contiguous :: targets(:)
    real(c_float), intent(inout), target, contiguous :: loss(:)
    real(c_float), intent(inout), target, optional :: mean
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_ptr) :: m
    m = c_null_ptr
    if (present(mean)) m = c_loc(mean)
    call cross_entropy_call(described(c_loc(logits), FLOAT32, shape(logits)), &
                            described(c_loc(targets), INT64, shape(targets)), &
                            described(c_loc(loss), FLOAT32, shape(loss)), m, opts, stat, errmsg)
  end subroutine
  subroutine cross_entropy_r8_i4(logits, targets, loss, mean, opts, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: logits(:, :)
    integer(c_int32_t), intent(in), target, contiguous :: targets(:)
    real(c_double), intent(inout), target, contiguous :: loss(:)
    real(c_double), intent(inout), target, optional :: mean
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_ptr) :: m
    m = c_null_ptr
    if (present(mean)) m = c_loc(mean)
    call cross_entropy_call(described(c_loc(logits), FLOAT64, shape(logits)), &
                            described(c_loc(targets), INT32, shape(targets)), &
                            described(c_loc(loss), FLOAT64, shape(loss)), m, opts, stat, errmsg)
  end subroutine
  subroutine cross_entropy_r8_i8(logits, targets, loss, mean, opts, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: logits(:, :)
    integer(c_int64_t), intent(in), target, contiguous :: targets(:)
    real(c_double), intent(inout), target, contiguous :: loss(:)
    real(c_double), intent(inout), target, optional :: mean
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_ptr) :: m
    m = c_null_ptr
    if (present(mean)) m = c_loc(mean)
    call cross_entropy_call(described(c_loc(logits), FLOAT64, shape(logits)), &
                            described(c_loc(targets), INT64, shape(targets)), &
                            described(c_loc(loss), FLOAT64, shape(loss)), m, opts, stat, errmsg)
  end subroutine

  !> dlogits(:, r) = dloss(r) times the gradient of row r's loss with respect to logits(:, r); lse,
  !> when present, the forward's logsumexp of each row (it saves a pass over the logits). dlogits is
  !> an array of its own (Fortran does not let one array be both logits and dlogits).
  subroutine cross_entropy_backward_r4_i4(logits, targets, dloss, dlogits, lse, opts, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: logits(:, :), dloss(:)
    integer(c_int32_t), intent(in), target, contiguous :: targets(:)
    real(c_float), intent(inout), target, contiguous :: dlogits(:, :)
    real(c_float), intent(in), target, contiguous, optional :: lse(:)
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: l
    if (present(lse)) l = described(c_loc(lse), FLOAT32, shape(lse))
    call cross_entropy_backward_call(described(c_loc(logits), FLOAT32, shape(logits)), &
                                     described(c_loc(targets), INT32, shape(targets)), &
                                     described(c_loc(dloss), FLOAT32, shape(dloss)), &
                                     described(c_loc(dlogits), FLOAT32, shape(dlogits)), l, opts, stat, errmsg)
  end subroutine
  subroutine cross_entropy_backward_r4_i8(logits, targets, dloss, dlogits, lse, opts, stat, errmsg)
    real(c_float), intent(in), target, contiguous :: logits(:, :), dloss(:)
    integer(c_int64_t), intent(in), target, contiguous :: targets(:)
    real(c_float), intent(inout), target, contiguous :: dlogits(:, :)
    real(c_float), intent(in), target, contiguous, optional :: lse(:)
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: l
    if (present(lse)) l = described(c_loc(lse), FLOAT32, shape(lse))
    call cross_entropy_backward_call(described(c_loc(logits), FLOAT32, shape(logits)), &
                                     described(c_loc(targets), INT64, shape(targets)), &
                                     described(c_loc(dloss), FLOAT32, shape(dloss)), &
                                     described(c_loc(dlogits), FLOAT32, shape(dlogits)), l, opts, stat, errmsg)
  end subroutine
  subroutine cross_entropy_backward_r8_i4(logits, targets, dloss, dlogits, lse, opts, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: logits(:, :), dloss(:)
    integer(c_int32_t), intent(in), target, contiguous :: targets(:)
    real(c_double), intent(inout), target, contiguous :: dlogits(:, :)
    real(c_double), intent(in), target, contiguous, optional :: lse(:)
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: l
    if (present(lse)) l = described(c_loc(lse), FLOAT64, shape(lse))
    call cross_entropy_backward_call(described(c_loc(logits), FLOAT64, shape(logits)), &
                                     described(c_loc(targets), INT32, shape(targets)), &
                                     described(c_loc(dloss), FLOAT64, shape(dloss)), &
                                     described(c_loc(dlogits), FLOAT64, shape(dlogits)), l, opts, stat, errmsg)
  end subroutine
  subroutine cross_entropy_backward_r8_i8(logits, targets, dloss, dlogits, lse, opts, stat, errmsg)
    real(c_double), intent(in), target, contiguous :: logits(:, :), dloss(:)
    integer(c_int64_t), intent(in), target, contiguous :: targets(:)
    real(c_double), intent(inout), target, contiguous :: dlogits(:, :)
    real(c_double), intent(in), target, contiguous, optional :: lse(:)
    type(kflash_cross_entropy_options), intent(in), optional :: opts
    integer, intent(out), optional :: stat
    character(*), intent(inout), optional :: errmsg
    type(c_array) :: l
    if (present(lse)) l = described(c_loc(lse), FLOAT64, shape(lse))
    call cross_entropy_backward_call(described(c_loc(logits), FLOAT64, shape(logits)), &
                                     described(c_loc(targets), INT64, shape(targets)), &
                                     described(c_loc(dloss), FLOAT64, shape(dloss)), &
                                     described(c_loc(dlogits), FLOAT64, shape(dlogits)), l, opts, stat, errmsg)
  end subroutine

end module kflash
