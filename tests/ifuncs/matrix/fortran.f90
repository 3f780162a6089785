! A Fortran ifunc (flang-22): a bind(c) entry that fills the matrix result
! with a dot product of two local arrays and a sum over the payload's values.
! No Fortran runtime calls, so it links on any target.
subroutine fortran_main(payload, payload_size, target_args) bind(c, name="fortran_main")
  use iso_c_binding
  implicit none
  type(c_ptr), value :: payload
  integer(c_size_t), value :: payload_size
  type(c_ptr), value :: target_args
  ! struct matrix_result { int64_t values[8]; char text[64]; int64_t calls; }
  type, bind(c) :: matrix_result
    integer(c_int64_t) :: values(8)
    character(kind=c_char) :: text(64)
    integer(c_int64_t) :: calls
  end type
  type(matrix_result), pointer :: r
  integer(c_int64_t), pointer :: given(:)
  integer(c_int64_t) :: a(16), b(16), i, n
  call c_f_pointer(target_args, r)
  do i = 1, 16
    a(i) = i
    b(i) = 17 - i
  end do
  r%values(1) = dot_product(a, b)
  n = payload_size / 8
  r%values(2) = 0
  if (n > 0) then
    call c_f_pointer(payload, given, [n])
    r%values(2) = sum(given)
  end if
  r%calls = r%calls + 1
end subroutine
