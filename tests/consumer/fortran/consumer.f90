! A user's Fortran program: softmax of two columns and attention of one query over three keys, each
! against its closed form.
program consumer
  use kflash
  implicit none
  real(8) :: x(3, 2), y(3, 2), q(2, 1, 1, 1), k(2, 3, 1, 1), v(1, 3, 1, 1), o(1, 1, 1, 1)
  real(8), parameter :: p(3) = [0.125d0, 0.25d0, 0.625d0]
  type(kflash_attention_options) :: opts
  integer :: stat
  character(200) :: errmsg
  logical :: ok
  call kflash_initialize()
  x(:, 1) = [0d0, log(2d0), log(5d0)]
  x(:, 2) = x(:, 1) + 3
  call kflash_softmax(x, y, stat, errmsg)
  ok = stat == 0 .and. all(abs(y(:, 1) - p) < 1d-15) .and. all(abs(y(:, 2) - p) < 1d-15)
  q(:, 1, 1, 1) = [1d0, 0d0]
  k(1, :, 1, 1) = x(:, 1)
  k(2, :, 1, 1) = 0
  v(1, :, 1, 1) = [8d0, 16d0, 24d0]
  opts%scale = 1
  call kflash_attention(q, k, v, o, opts, stat=stat, errmsg=errmsg)
  ok = ok .and. stat == 0 .and. abs(o(1, 1, 1, 1) - sum(p * v(1, :, 1, 1))) < 1d-13
  print '(a, a, a, 3f8.4, a, f10.6, a, l1)', 'kflash ', kflash_version(), ' from Fortran: softmax', y(:, 1), &
    ', attention', o(1, 1, 1, 1), ': ', ok
  call kflash_finalize()
  if (.not. ok) error stop 'consumer: wrong result'
end program consumer
