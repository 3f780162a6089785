! The counter ifunc in Fortran: adds the payload's 64-bit increment (1 if the
! payload is empty) to the 64-bit total the target passes as target_args.
subroutine fortran_counter_main(payload, payload_size, target_args) &
    bind(c, name="fortran_counter_main")
  use iso_c_binding
  implicit none
  type(c_ptr), value :: payload
  integer(c_size_t), value :: payload_size
  type(c_ptr), value :: target_args
  integer(c_int64_t), pointer :: total, increment
  call c_f_pointer(target_args, total)
  if (payload_size >= 8) then
    call c_f_pointer(payload, increment)
    total = total + increment
  else
    total = total + 1
  end if
end subroutine
