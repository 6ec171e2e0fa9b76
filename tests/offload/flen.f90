! flen.f90 - libflen.so: dsyevd_ and zgemm_ that compute nothing
! and only record the hidden lengths of their character arguments, for
! the test that the wrappers forward them (tests/offload/flenmain.f90).
module flen_seen
  implicit none
  integer :: seen(4) = -1
end module flen_seen

subroutine dsyevd(jobz, uplo, n, a, lda, w, work, lwork, iwork, liwork, info)
  use flen_seen
  character(len=*) :: jobz, uplo
  integer :: n, lda, lwork, liwork, info, iwork(*)
  double precision :: a(lda, *), w(*), work(*)
  seen(1) = len(jobz)
  seen(2) = len(uplo)
  info = 0
end subroutine dsyevd

subroutine zgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
  use flen_seen
  character(len=*) :: transa, transb
  integer :: m, n, k, lda, ldb, ldc
  complex(kind=8) :: alpha, beta, a(lda, *), b(ldb, *), c(ldc, *)
  seen(3) = len(transa)
  seen(4) = len(transb)
end subroutine zgemm

subroutine flen_report()
  use flen_seen
  write (*, '(a, 4(1x, i0))') 'lengths', seen
end subroutine flen_report
