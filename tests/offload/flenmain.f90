! flenmain.f90 - calls libflen.so's dsyevd and zgemm with option strings
! of lengths 7, 5, 12 and 9 and prints what the library received.
program flenmain
  implicit none
  double precision :: a(100, 100), w(100), work(1)
  integer :: iwork(1), info
  complex(kind=8) :: za(100, 100), zc(100, 100)
  a = 1
  za = 1
  call dsyevd('Vectors', 'Upper', 100, a, 100, w, work, 1, iwork, 1, info)
  call zgemm('No transpose', 'Conjugate', 100, 100, 100, (1d0, 0d0), za, 100, &
             za, 100, (0d0, 0d0), zc, 100)
  call flen_report()
end program flenmain
