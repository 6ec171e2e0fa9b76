! fcheck.f90 - a Fortran program calling dgesv, dsyevd and zgemm with
! character arguments (so gfortran passes hidden string lengths), linked
! with the system's LAPACK and BLAS. Prints each result's residual check
! and the results themselves (for the bit-identity test).
program fcheck
  implicit none
  integer, parameter :: n = 120
  double precision :: a(n, n), a0(n, n), b(n, 3), b0(n, 3), w(n)
  double precision, allocatable :: work(:)
  integer, allocatable :: iwork(:)
  integer :: ipiv(n), info, lwork, liwork, i, j
  complex(kind=8) :: za(n, n), zb(n, n), zc(n, n), zr(n, n)
  double precision :: r, q(1)
  integer :: iq(1)

  do j = 1, n
     do i = 1, n
        a(i, j) = sin(dble(i * 7 + j * 3)) + merge(dble(n), 0d0, i == j)
        za(i, j) = dcmplx(cos(dble(i + 2 * j)), sin(dble(3 * i - j)))
        zb(i, j) = dcmplx(sin(dble(i * j)), cos(dble(i - j)))
     end do
     b(j, :) = [dble(j), 1d0, -dble(j) / n]
  end do
  a0 = a
  b0 = b

  call dgesv(n, 3, a, n, ipiv, b, n, info)
  r = maxval(abs(matmul(a0, b) - b0))
  write (*, '(a, i0, a, l1)') 'dgesv info=', info, ' ok=', r < 1d-10
  write (*, '(3es25.16)') b(1:5, :)

  ! dsyevd with long option strings: only their first letters count
  a = (a0 + transpose(a0)) / 2
  a0 = a
  call dsyevd('Vectors', 'Upper', n, a, n, w, q, -1, iq, -1, info)
  lwork = int(q(1))
  liwork = iq(1)
  allocate (work(lwork), iwork(liwork))
  call dsyevd('Vectors', 'Upper', n, a, n, w, work, lwork, iwork, liwork, info)
  r = maxval(abs(matmul(a0, a) - a * spread(w, 1, n)))
  write (*, '(a, i0, a, l1)') 'dsyevd info=', info, ' ok=', r < 1d-9
  write (*, '(4es25.16)') w(1:8)

  call zgemm('No transpose', 'Conjugate', n, n, n, (1d0, 0.5d0), za, n, &
             zb, n, (0d0, 0d0), zc, n)
  zr = (1d0, 0.5d0) * matmul(za, conjg(transpose(zb)))
  write (*, '(a, l1)') 'zgemm ok=', maxval(abs(zc - zr)) < 1d-9
  write (*, '(4es25.16)') zc(1:2, 1:2)
end program fcheck
