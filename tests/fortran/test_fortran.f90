! The Fortran module kflash against a naive reference in extended precision (real(ep), 64-bit
! mantissa): softmax and logsumexp on 1000 rows of 4096 (real(4)), log_softmax and logsumexp of one
! real(8) row, attention with GQA and causal (real(4)) and with a window, softcap and sinks (real(8)),
! a merge of two key halves, attention's gradients against central differences, the row gradients,
! cross-entropy and its gradient (real(4) with int64 targets, real(8) with int32), and bad input
! through stat/errmsg (nothing written). Stops with a nonzero code on any failure. With an argument,
! a bad call without stat must stop the program.
program test_fortran
  use kflash
  implicit none
  integer, parameter :: ep = selected_real_kind(18)
  integer :: failures = 0, seed_size, i
  integer, allocatable :: seed(:)

  call kflash_initialize()
  if (command_argument_count() > 0) call stop_without_stat()
  print '(a, a, a, a)', 'kflash ', kflash_version(), ', backends ', kflash_backends()
  call random_seed(size=seed_size)
  seed = [(12345 + 7 * i, i = 1, seed_size)]
  call random_seed(put=seed)
  call softmax_rows()
  call one_row_r8()
  call attention_gqa_causal()
  call attention_window_sinks()
  call merge_halves()
  call attention_backward_differences()
  call gradients()
  call cross_entropy_rows()
  call errors()
  call kflash_finalize()
  if (failures > 0) then
    print '(i0, a)', failures, ' failures'
    error stop 1
  end if
  print '(a)', 'all checks passed'

contains

  ! A failed call without stat stops the program with the message (the test 'fortran_error_stop').
  subroutine stop_without_stat()
    real(8) :: x(4, 3), y(4, 2)
    x = 0
    call kflash_softmax(x, y)
    print '(a)', 'not reached'
  end subroutine

  subroutine check(ok, what, value)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    real(8), intent(in), optional :: value
    if (ok) return
    failures = failures + 1
    if (present(value)) then
      print '(a, a, es12.4)', 'failed: ', what, value
    else
      print '(a, a)', 'failed: ', what
    end if
  end subroutine

  !> Uniform values in [lo, hi).
  subroutine fill(a, lo, hi)
    real(8), intent(out) :: a(:)
    real(8), intent(in) :: lo, hi
    call random_number(a)
    a = lo + (hi - lo) * a
  end subroutine

  ! softmax of x(4096, 1000) real(4): p within 16 eps (1 + |x - max|) p, lse within 1e-6 + 2 eps |lse|.
  subroutine softmax_rows()
    integer, parameter :: cols = 4096, rows = 1000
    real(4), allocatable :: x(:, :), y(:, :), lse(:)
    real(8), allocatable :: buf(:)
    real(ep) :: m, l, ref
    real(8) :: worst, worst_lse
    integer :: r, c
    allocate(x(cols, rows), y(cols, rows), lse(rows), buf(cols * rows))
    call fill(buf, -20d0, 20d0)
    x = reshape(real(buf, 4), [cols, rows])
    call kflash_softmax(x, y)
    call kflash_logsumexp(x, lse)
    worst = 0
    worst_lse = 0
    do r = 1, rows
      m = maxval(real(x(:, r), ep))
      l = sum(exp(real(x(:, r), ep) - m))
      do c = 1, cols
        ref = exp(real(x(c, r), ep) - m) / l
        worst = max(worst, real(abs(y(c, r) - ref) / (ref * (1 + abs(x(c, r) - m))), 8))
      end do
      worst_lse = max(worst_lse, real(abs(lse(r) - (m + log(l))) / (1e-6_ep + 2 * epsilon(1.0) * abs(m + log(l))), 8))
    end do
    call check(worst <= 16 * epsilon(1.0), 'softmax real(4): worst error over its scale', worst)
    call check(worst_lse <= 1, 'logsumexp real(4): worst error over its tolerance', worst_lse)
  end subroutine

  ! log_softmax and logsumexp of one real(8) row of 777: within 1e-13 (relative to 1 + |value|).
  subroutine one_row_r8()
    real(8) :: x(777), y(777), lse
    real(ep) :: m, l
    call fill(x, -300d0, 300d0)
    call kflash_log_softmax(x, y)
    call kflash_logsumexp(x, lse)
    m = maxval(real(x, ep))
    l = log(sum(exp(real(x, ep) - m)))
    call check(maxval(real(abs(y - (x - m - l)) / (1 + abs(x - m - l)), 8)) <= 1d-13, 'log_softmax real(8) row')
    call check(real(abs(lse - (m + l)) / (1 + abs(m + l)), 8) <= 1d-13, 'logsumexp real(8) row')
  end subroutine

  !> Reference attention of q(D, Nq, Hq, B) over k(D, Nk, Hk, B), v(Dv, Nk, Hk, B), bottom-right aligned.
  subroutine reference(q, k, v, scale, causal, left, right, softcap, sinks, o, lse)
    real(8), intent(in) :: q(:, :, :, :), k(:, :, :, :), v(:, :, :, :), scale, softcap
    logical, intent(in) :: causal
    integer, intent(in) :: left, right
    real(8), intent(in), optional :: sinks(:)
    real(ep), intent(out) :: o(:, :, :, :), lse(:, :, :)
    real(ep) :: s(size(k, 2)), m, l, raw
    logical :: visible(size(k, 2))
    integer :: b, h, i, j, c, nq, nk, group
    nq = size(q, 2)
    nk = size(k, 2)
    group = size(q, 3) / size(k, 3)
    do b = 1, size(q, 4)
      do h = 1, size(q, 3)
        do i = 1, nq
          c = i + nk - nq
          m = -huge(1.0_ep)
          if (present(sinks)) m = max(m, real(sinks(h), ep))
          do j = 1, nk
            visible(j) = (left < 0 .or. j >= c - left) .and. &
                         merge(j <= c, right < 0 .or. j <= c + right, causal)
            if (.not. visible(j)) cycle
            raw = scale * sum(real(q(:, i, h, b), ep) * k(:, j, (h - 1) / group + 1, b))
            if (softcap > 0) raw = softcap * tanh(raw / softcap)
            s(j) = raw
            m = max(m, raw)
          end do
          l = 0
          if (present(sinks)) l = exp(sinks(h) - m)
          o(:, i, h, b) = 0
          do j = 1, nk
            if (.not. visible(j)) cycle
            l = l + exp(s(j) - m)
            o(:, i, h, b) = o(:, i, h, b) + exp(s(j) - m) * v(:, j, (h - 1) / group + 1, b)
          end do
          o(:, i, h, b) = o(:, i, h, b) / l
          lse(i, h, b) = m + log(l)
        end do
      end do
    end do
  end subroutine

  ! real(4), GQA 4/2, causal with Nq < Nk: o within 3e-6 (|v| <= 1), lse within 3e-6 (1 + |lse|).
  subroutine attention_gqa_causal()
    integer, parameter :: d = 16, dv = 24, nq = 37, nk = 53, hq = 4, hk = 2, nb = 2
    real(8) :: q8(d, nq, hq, nb), k8(d, nk, hk, nb), v8(dv, nk, hk, nb), buf(dv * nk * hk * nb)
    real(4) :: q(d, nq, hq, nb), k(d, nk, hk, nb), v(dv, nk, hk, nb), o(dv, nq, hq, nb), lse(nq, hq, nb)
    real(ep), allocatable :: ref(:, :, :, :), ref_lse(:, :, :)
    type(kflash_attention_options) :: opts
    allocate(ref(dv, nq, hq, nb), ref_lse(nq, hq, nb))
    call fill(buf(:d * nq * hq * nb), -2d0, 2d0)
    q = reshape(real(buf(:d * nq * hq * nb), 4), shape(q))
    call fill(buf(:d * nk * hk * nb), -2d0, 2d0)
    k = reshape(real(buf(:d * nk * hk * nb), 4), shape(k))
    call fill(buf(:dv * nk * hk * nb), -1d0, 1d0)
    v = reshape(real(buf(:dv * nk * hk * nb), 4), shape(v))
    q8 = q
    k8 = k
    v8 = v
    call reference(q8, k8, v8, 0.25d0, .true., -1, -1, 0d0, o=ref, lse=ref_lse)
    opts%causal = .true.
    call kflash_attention(q, k, v, o, opts, lse)
    call check(maxval(real(abs(o - ref), 8)) <= 3d-6, 'attention real(4) GQA causal: o', maxval(real(abs(o - ref), 8)))
    call check(maxval(real(abs(lse - ref_lse) / (1 + abs(ref_lse)), 8)) <= 3d-6, 'attention real(4) GQA causal: lse')
  end subroutine

  ! real(8), MQA, window (5 left, 2 right), softcap 3, sinks (one of them -huge): within 1e-12.
  subroutine attention_window_sinks()
    integer, parameter :: d = 8, n = 20, hq = 3
    real(8) :: q(d, n, hq, 1), k(d, n, 1, 1), v(d, n, 1, 1), o(d, n, hq, 1), lse(n, hq, 1)
    real(ep) :: ref(d, n, hq, 1), ref_lse(n, hq, 1)
    type(kflash_attention_options) :: opts
    call random_number(q)
    call random_number(k)
    call random_number(v)
    q = 6 * q - 3
    k = 6 * k - 3
    v = 2 * v - 1
    opts%scale = 0.3d0
    opts%softcap = 3
    opts%window_left = 5
    opts%window_right = 2
    opts%sinks = [0.5d0, -huge(1d0), 2d0]
    call reference(q, k, v, 0.3d0, .false., 5, 2, 3d0, opts%sinks, ref, ref_lse)
    call kflash_attention(q, k, v, o, opts, lse)
    call check(maxval(real(abs(o - ref) / (1 + abs(ref)), 8)) <= 1d-12, 'attention real(8) window, softcap, sinks: o')
    call check(maxval(real(abs(lse - ref_lse) / (1 + abs(ref_lse)), 8)) <= 1d-12, 'attention real(8) ...: lse')
  end subroutine

  !> sum(dout * o) for o = kflash_attention(q, k, v, opts) in real(8).
  real(8) function attention_loss(q, k, v, dout, opts) result(loss)
    real(8), intent(in) :: q(:, :, :, :), k(:, :, :, :), v(:, :, :, :), dout(:, :, :, :)
    type(kflash_attention_options), intent(in) :: opts
    real(8) :: o(size(dout, 1), size(dout, 2), size(dout, 3), size(dout, 4))
    call kflash_attention(q, k, v, o, opts)
    loss = sum(dout * o)
  end function

  ! kflash_attention_backward (real(8), GQA 2/1, causal with Nq < Nk, softcap, sinks) against central
  ! differences of sum(dout * o) through kflash_attention, step 1e-6 (truncation and rounding near
  ! 1e-10): every element of dq, dk, dv and dsinks within 1e-7 (1 + max |gradient|). The real(4)
  ! gradients within 1e-4 of them; dq of the wrong shape sets stat and writes nothing.
  subroutine attention_backward_differences()
    integer, parameter :: d = 3, dv = 4, nq = 6, nk = 7, hq = 2
    real(8), parameter :: step = 1d-6
    real(8) :: q(d, nq, hq, 1), k(d, nk, 1, 1), v(dv, nk, 1, 1), o(dv, nq, hq, 1), lse(nq, hq, 1), dout(dv, nq, hq, 1)
    real(8) :: dq(d, nq, hq, 1), dk(d, nk, 1, 1), dv_(dv, nk, 1, 1), dsinks(hq), bad(d + 1, nq, hq, 1), worst, top
    real(8) :: qf(d * nq * hq), kf(d * nk), vf(dv * nk), gq(d * nq * hq), gk(d * nk), gv(dv * nk), up, down
    real(4) :: dq4(d, nq, hq, 1), dk4(d, nk, 1, 1), dv4(dv, nk, 1, 1)
    type(kflash_attention_options) :: opts, moved
    integer :: e, status
    character(200) :: message
    call random_number(q)
    call random_number(k)
    call random_number(v)
    call random_number(dout)
    q = 4 * q - 2
    k = 4 * k - 2
    v = 2 * v - 1
    dout = 2 * dout - 1
    opts%causal = .true.
    opts%softcap = 2
    opts%sinks = [0.5d0, -0.25d0]
    call kflash_attention(q, k, v, o, opts, lse)
    call kflash_attention_backward(q, k, v, o, lse, dout, dq, dk, dv_, opts, dsinks)
    top = max(maxval(abs(dq)), maxval(abs(dk)), maxval(abs(dv_)), maxval(abs(dsinks)))
    gq = reshape(dq, [size(dq)])
    gk = reshape(dk, [size(dk)])
    gv = reshape(dv_, [size(dv_)])
    worst = 0
    do e = 1, size(qf)
      qf = reshape(q, [size(q)])
      qf(e) = qf(e) + step
      up = attention_loss(reshape(qf, shape(q)), k, v, dout, opts)
      qf(e) = qf(e) - 2 * step
      down = attention_loss(reshape(qf, shape(q)), k, v, dout, opts)
      worst = max(worst, abs((up - down) / (2 * step) - gq(e)))
    end do
    do e = 1, size(kf)
      kf = reshape(k, [size(k)])
      kf(e) = kf(e) + step
      up = attention_loss(q, reshape(kf, shape(k)), v, dout, opts)
      kf(e) = kf(e) - 2 * step
      down = attention_loss(q, reshape(kf, shape(k)), v, dout, opts)
      worst = max(worst, abs((up - down) / (2 * step) - gk(e)))
    end do
    do e = 1, size(vf)
      vf = reshape(v, [size(v)])
      vf(e) = vf(e) + step
      up = attention_loss(q, k, reshape(vf, shape(v)), dout, opts)
      vf(e) = vf(e) - 2 * step
      down = attention_loss(q, k, reshape(vf, shape(v)), dout, opts)
      worst = max(worst, abs((up - down) / (2 * step) - gv(e)))
    end do
    do e = 1, hq
      moved = opts
      moved%sinks(e) = opts%sinks(e) + step
      up = attention_loss(q, k, v, dout, moved)
      moved%sinks(e) = opts%sinks(e) - step
      down = attention_loss(q, k, v, dout, moved)
      worst = max(worst, abs((up - down) / (2 * step) - dsinks(e)))
    end do
    call check(worst <= 1d-7 * (1 + top), 'attention_backward real(8) against central differences', worst)
    call kflash_attention_backward(real(q, 4), real(k, 4), real(v, 4), real(o, 4), real(lse, 4), real(dout, 4), &
                                   dq4, dk4, dv4, opts)
    worst = max(maxval(abs(dq4 - dq)), maxval(abs(dk4 - dk)), maxval(abs(dv4 - dv_)))
    call check(worst <= 1d-4 * (1 + top), 'attention_backward real(4) against real(8)', worst)
    dk = 7
    message = ''
    call kflash_attention_backward(q, k, v, o, lse, dout, bad, dk, dv_, opts, stat=status, errmsg=message)
    call check(status /= 0 .and. index(message, 'dq') > 0 .and. all(dk == 7), &
               'attention_backward: dq of the wrong shape sets stat and writes nothing')
  end subroutine

  ! Attention over keys 1:29 and 30:64 merged, against one call over all keys: within 1e-13.
  subroutine merge_halves()
    integer, parameter :: d = 8, n = 9, nk = 64, h = 2
    real(8) :: q(d, n, h, 1), k(d, nk, h, 1), v(d, nk, h, 1), full(d, n, h, 1), full_lse(n, h, 1)
    real(8) :: parts(d, n, h, 1, 2), part_lse(n, h, 1, 2), o(d, n, h, 1), lse(n, h, 1)
    type(kflash_attention_options) :: opts
    call random_number(q)
    call random_number(k)
    call random_number(v)
    q = 4 * q - 2
    k = 4 * k - 2
    call kflash_attention(q, k, v, full, opts, full_lse)
    call kflash_attention(q, k(:, 1:29, :, :), v(:, 1:29, :, :), parts(:, :, :, :, 1), opts, part_lse(:, :, :, 1))
    call kflash_attention(q, k(:, 30:, :, :), v(:, 30:, :, :), parts(:, :, :, :, 2), opts, part_lse(:, :, :, 2))
    call kflash_merge_attention(parts, part_lse, o, lse)
    call check(maxval(abs(o - full)) <= 1d-13, 'merge of two halves: o', maxval(abs(o - full)))
    call check(maxval(abs(lse - full_lse) / (1 + abs(full_lse))) <= 1d-13, 'merge of two halves: lse')
  end subroutine

  ! The row gradients against their formulas in extended precision: softmax_backward on y(300, 20)
  ! real(8) (within 64 eps of each element's magnitude |y| (|dy| + sum |dy y|)), log_softmax_backward
  ! in place over dy, logsumexp_backward of one real(4) row; a dx of another shape is refused.
  subroutine gradients()
    real(8) :: x(300, 20), y(300, 20), dy(300, 20), dx(300, 20), lp(300, 20), g(300, 20)
    real(4) :: x4(50), dx4(50), lse4, dlse4
    real(ep) :: s, abs_s, want, worst, m
    integer :: r, stat
    character(256) :: errmsg
    call random_number(x)
    call random_number(dy)
    x = 16 * x - 8
    dy = 2 * dy - 1
    call kflash_softmax(x, y)
    call kflash_softmax_backward(y, dy, dx)
    worst = 0
    do r = 1, 20
      s = sum(real(dy(:, r), ep) * y(:, r))
      abs_s = sum(abs(real(dy(:, r), ep) * y(:, r)))
      do i = 1, 300
        want = y(i, r) * (dy(i, r) - s)
        m = abs(real(y(i, r), ep)) * (abs(real(dy(i, r), ep)) + abs_s)
        worst = max(worst, abs(dx(i, r) - want) / (64 * epsilon(1d0) * m + tiny(1d0)))
      end do
    end do
    call check(worst <= 1, 'softmax_backward real(8): worst error over its tolerance', real(worst, 8))
    call kflash_log_softmax(x, lp)
    g = dy
    call kflash_log_softmax_backward(lp, g, g)
    worst = 0
    do r = 1, 20
      s = sum(real(dy(:, r), ep))
      abs_s = sum(abs(real(dy(:, r), ep)))
      do i = 1, 300
        want = dy(i, r) - exp(real(lp(i, r), ep)) * s
        m = abs(real(dy(i, r), ep)) + exp(real(lp(i, r), ep)) * abs_s * (1 + abs(real(lp(i, r), ep)))
        worst = max(worst, abs(g(i, r) - want) / (64 * epsilon(1d0) * m + tiny(1d0)))
      end do
    end do
    call check(worst <= 1, 'log_softmax_backward real(8) in place: worst error over its tolerance', real(worst, 8))
    x4 = real(x(1:50, 1), 4)
    call kflash_logsumexp(x4, lse4)
    dlse4 = -1.5
    call kflash_logsumexp_backward(x4, lse4, dlse4, dx4)
    worst = maxval(abs(dx4 - dlse4 * exp(real(x4, ep) - lse4)) / &
                   (64 * epsilon(1.0) * abs(dlse4 * exp(real(x4, ep) - lse4)) * (1 + abs(real(x4, ep)) + abs(lse4))))
    call check(worst <= 1, 'logsumexp_backward real(4) row: worst error over its tolerance', real(worst, 8))
    dx = 7
    call kflash_softmax_backward(y, dy, dx(1:299, :), stat, errmsg)
    call check(stat /= 0 .and. index(errmsg, 'kflash_softmax_backward: dx (299, 20) must have the shape of y (300, 20)') &
               > 0, 'softmax_backward shapes: ' // trim(errmsg))
    call check(all(dx == 7), 'a failed gradient call wrote dx')
  end subroutine

  ! Bad input: stat nonzero, errmsg naming the argument, nothing written.
  !> Cross-entropy of 9 rows of 70 classes (one row ignored), label smoothing 0.1 and z-loss 1e-3:
  !> each row's loss (1 - eps)(lse - x_t) + eps / C sum_c (lse - x_c) + z lse**2 and the mean
  !> (real(4) logits, int64 targets); the gradient dloss ((1 + 2 z lse) p_c - eps / C - (1 - eps)
  !> [c = t]) with and without the forward's lse (real(8), int32 targets); a target out of range.
  subroutine cross_entropy_rows()
    integer, parameter :: NC = 70, NR = 9
    real(8) :: x8(NC, NR), dloss8(NR), dx8(NC, NR), dx8_lse(NC, NR), lse8(NR), loss8(NR), err
    real(4) :: x4(NC, NR), loss4(NR), mean4
    integer(8) :: t8(NR)
    integer(4) :: t4(NR)
    real(ep) :: lse(NR), ref_loss(NR), ref_mean, p, g
    type(kflash_cross_entropy_options) :: opts
    integer :: r, k, stat, used
    character(200) :: msg
    do r = 1, NR
      call fill(x8(:, r), -6d0, 6d0)
      t8(r) = int(mod(7 * r + 3, NC), 8)
    end do
    t8(5) = -100
    t4 = int(t8, 4)
    call fill(dloss8, -2d0, 2d0)
    x4 = real(x8, 4)
    opts%label_smoothing = 0.1d0
    opts%z_loss = 1d-3
    ref_mean = 0
    used = 0
    do r = 1, NR
      lse(r) = maxval(real(x4(:, r), ep)) + log(sum(exp(real(x4(:, r), ep) - maxval(real(x4(:, r), ep)))))
      ref_loss(r) = 0
      if (t8(r) == -100) cycle
      ref_loss(r) = (1 - 0.1_ep) * (lse(r) - real(x4(t8(r) + 1, r), ep)) + 0.1_ep / NC * sum(lse(r) - real(x4(:, r), ep)) &
                    + 1e-3_ep * lse(r)**2
      ref_mean = ref_mean + ref_loss(r)
      used = used + 1
    end do
    ref_mean = ref_mean / used
    call kflash_cross_entropy(x4, t8, loss4, mean4, opts)
    err = real(maxval(abs(real(loss4, ep) - ref_loss)) / maxval(abs(ref_loss)), 8)
    call check(err < 1d-6, 'cross_entropy real(4) loss', err)
    call check(loss4(5) == 0, 'cross_entropy: the ignored row has loss 0')
    err = real(abs(mean4 - ref_mean) / abs(ref_mean), 8)
    call check(err < 1d-6, 'cross_entropy real(4) mean', err)

    call kflash_cross_entropy(x8, t4, loss8, opts=opts)
    call kflash_logsumexp(x8, lse8)
    call kflash_cross_entropy_backward(x8, t4, dloss8, dx8, opts=opts)
    call kflash_cross_entropy_backward(x8, t4, dloss8, dx8_lse, lse8, opts)
    err = 0
    do r = 1, NR
      lse(r) = maxval(real(x8(:, r), ep)) + log(sum(exp(real(x8(:, r), ep) - maxval(real(x8(:, r), ep)))))
      do k = 1, NC
        g = 0
        if (t4(r) /= -100) then
          p = exp(real(x8(k, r), ep) - lse(r))
          g = dloss8(r) * ((1 + 2 * 1e-3_ep * lse(r)) * p - 0.1_ep / NC)
          if (k == t4(r) + 1) g = g - dloss8(r) * (1 - 0.1_ep)
        end if
        err = max(err, real(abs(dx8(k, r) - g), 8), real(abs(dx8_lse(k, r) - g), 8))
      end do
    end do
    call check(err < 1d-12, 'cross_entropy_backward real(8)', err)
    call check(all(dx8(:, 5) == 0), 'cross_entropy_backward: the ignored row has gradient 0')

    loss8 = 7
    t4(2) = NC
    call kflash_cross_entropy(x8, t4, loss8, opts=opts, stat=stat, errmsg=msg)
    call check(stat /= 0 .and. index(msg, 'kflash_cross_entropy') > 0 .and. all(loss8 == 7), &
               'cross_entropy: a target out of range fails and writes nothing: '//trim(msg))
  end subroutine

  subroutine errors()
    real(4) :: x(4, 3), y(4, 2), out(2), q(8, 4, 3, 2), k(8, 5, 2, 2), v(8, 5, 2, 2), k1(8, 5, 1, 2), &
               v1(8, 4, 1, 2), o(8, 4, 3, 2), y2(4, 3)
    real(8) :: parts(8, 4, 3, 2, 2), part_lse(4, 3, 2, 2), o8(8, 4, 3, 2), lse8(4, 3, 3)
    type(kflash_attention_options) :: opts
    integer :: stat
    character(256) :: errmsg
    x = 1
    y = 7
    out = 7
    q = 0.5
    k = 0.25
    v = 0.25
    k1 = 0.25
    v1 = 0.25
    o = 7
    o8 = 7
    parts = 0
    part_lse = 0
    call kflash_softmax(x, y, stat, errmsg)
    call check(stat /= 0 .and. index(errmsg, 'kflash_softmax: y (4, 2) must have the shape of x (4, 3)') > 0, &
               'softmax shapes: ' // trim(errmsg))
    call kflash_logsumexp(x, out, stat, errmsg)
    call check(stat /= 0 .and. index(errmsg, 'out has 2 elements, but x (4, 3) has 3 rows') > 0, &
               'logsumexp shapes: ' // trim(errmsg))
    call kflash_attention(q, k, v, o, opts, stat=stat, errmsg=errmsg)
    call check(stat /= 0 .and. index(errmsg, 'Hq') > 0 .and. index(errmsg, 'Hk') > 0, &
               'Hq = 3 not a multiple of Hk = 2: ' // trim(errmsg))
    call kflash_attention(q, k1, v1, o, opts, stat=stat, errmsg=errmsg)
    call check(stat /= 0 .and. index(errmsg, 'v (2, 1, 4, 8)') > 0, 'k and v of other lengths: ' // trim(errmsg))
    opts%sinks = [1d0, 2d0]
    call kflash_attention(q, k1, k1, o, opts, stat=stat, errmsg=errmsg)
    call check(stat /= 0 .and. index(errmsg, 'options.sinks') > 0, 'two sinks for three heads: ' // trim(errmsg))
    call kflash_merge_attention(parts, part_lse, o8, lse8, stat, errmsg)
    call check(stat /= 0 .and. index(errmsg, 'lse (3, 3, 4)') > 0, 'merge shapes: ' // trim(errmsg))
    call check(all(y == 7) .and. all(out == 7) .and. all(o == 7) .and. all(o8 == 7), 'a failed call wrote its output')
    ! A good call after the errors sets stat to 0.
    call kflash_softmax(x, y2, stat, errmsg)
    call check(stat == 0 .and. all(abs(y2 - 0.25) < 1e-6), 'a good call after errors')
  end subroutine

end program test_fortran
