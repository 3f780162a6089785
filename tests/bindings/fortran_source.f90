! A Fortran source of the counter ifunc, through the C API and iso_c_binding.
!   fortran_source TRANSPORT CONTAINER KEY FRAMES PORT
! Sends increments 1..FRAMES to the target listening on 127.0.0.1:PORT.
module threechains
  use iso_c_binding
  implicit none

  ! threechains_channel_options, field for field (<threechains/threechains.h>)
  type, bind(c) :: channel_options
    integer(c_size_t) :: size
    integer(c_int32_t) :: slots
    integer(c_size_t) :: slot_size
    integer(c_int32_t) :: connect_timeout_ms
    integer(c_int32_t) :: timeout_ms
    type(c_ptr) :: identity
    type(c_ptr) :: target_key
  end type

  interface
    integer(c_int) function context_create(transport, out) bind(c, name="threechains_context_create")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*) :: transport
      type(c_ptr) :: out
    end function
    integer(c_int) function worker_create(context, out) bind(c, name="threechains_worker_create")
      import :: c_int, c_ptr
      type(c_ptr), value :: context
      type(c_ptr) :: out
    end function
    integer(c_int) function keypair_load(path, out) bind(c, name="threechains_keypair_load")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*) :: path
      type(c_ptr) :: out
    end function
    integer(c_int) function ifunc_load(path, out) bind(c, name="threechains_ifunc_load")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*) :: path
      type(c_ptr) :: out
    end function
    integer(c_int) function source_create(worker, out) bind(c, name="threechains_source_create")
      import :: c_int, c_ptr
      type(c_ptr), value :: worker
      type(c_ptr) :: out
    end function
    subroutine channel_options_init(options) bind(c, name="threechains_channel_options_init")
      import :: channel_options
      type(channel_options) :: options
    end subroutine
    integer(c_int) function source_connect(source, host, port, options, out) &
        bind(c, name="threechains_source_connect")
      import :: c_int, c_char, c_ptr, c_int16_t, channel_options
      type(c_ptr), value :: source
      character(kind=c_char), dimension(*) :: host
      integer(c_int16_t), value :: port
      type(channel_options) :: options
      type(c_ptr) :: out
    end function
    integer(c_int) function channel_send(channel, ifunc, payload, size) &
        bind(c, name="threechains_channel_send")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: channel, ifunc
      integer(c_int64_t) :: payload
      integer(c_size_t), value :: size
    end function
    integer(c_int) function channel_close(channel) bind(c, name="threechains_channel_close")
      import :: c_int, c_ptr
      type(c_ptr), value :: channel
    end function
    subroutine channel_destroy(h) bind(c, name="threechains_channel_destroy")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    subroutine source_destroy(h) bind(c, name="threechains_source_destroy")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    subroutine ifunc_destroy(h) bind(c, name="threechains_ifunc_destroy")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    subroutine keypair_destroy(h) bind(c, name="threechains_keypair_destroy")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    subroutine worker_destroy(h) bind(c, name="threechains_worker_destroy")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    subroutine context_destroy(h) bind(c, name="threechains_context_destroy")
      import :: c_ptr
      type(c_ptr), value :: h
    end subroutine
    type(c_ptr) function last_error() bind(c, name="threechains_last_error")
      import :: c_ptr
    end function
    integer(c_size_t) function strlen(s) bind(c, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

contains

  ! Stops the program with the library's message if a call failed.
  subroutine check(status, what)
    integer(c_int), intent(in) :: status
    character(*), intent(in) :: what
    character(kind=c_char), pointer :: message(:)
    if (status /= 0) then
      call c_f_pointer(last_error(), message, [strlen(last_error())])
      write (0, '(a, a, i0, a, 1000a)') what, ' failed (status ', status, '): ', message
      error stop 1
    end if
  end subroutine

  function c_string(text) result(out)
    character(*), intent(in) :: text
    character(kind=c_char, len=len_trim(text) + 1) :: out
    out = trim(text)//c_null_char
  end function

end module

program fortran_source
  use threechains
  implicit none
  character(len=4096) :: transport, container, key, port_text, frames_text
  type(c_ptr) :: context, worker, keypair, source, channel, ifunc
  type(channel_options) :: options
  integer :: port, i
  integer(c_int64_t) :: frames, increment

  if (command_argument_count() /= 5) then
    write (0, *) 'usage: fortran_source TRANSPORT CONTAINER KEY FRAMES PORT'
    error stop 2
  end if
  call get_command_argument(1, transport)
  call get_command_argument(2, container)
  call get_command_argument(3, key)
  call get_command_argument(4, frames_text)
  call get_command_argument(5, port_text)
  read (port_text, *) port
  read (frames_text, *) frames

  call check(context_create(c_string(transport), context), 'threechains_context_create')
  call check(worker_create(context, worker), 'threechains_worker_create')
  call check(keypair_load(c_string(key), keypair), 'threechains_keypair_load')
  call check(ifunc_load(c_string(container), ifunc), 'threechains_ifunc_load')
  call check(source_create(worker, source), 'threechains_source_create')
  call channel_options_init(options)
  options%identity = keypair
  ! The port is a uint16_t: pass its bits (ports above 32767 are negative here).
  call check(source_connect(source, c_string('127.0.0.1'), int(transfer(int(port, c_int32_t), &
                            0_c_int16_t), c_int16_t), options, channel), 'threechains_source_connect')
  do i = 1, int(frames)
    increment = i
    call check(channel_send(channel, ifunc, increment, 8_c_size_t), 'threechains_channel_send')
  end do
  call check(channel_close(channel), 'threechains_channel_close')
  print '(a, i0, a)', 'fortran source: ', frames, ' frames sent'
  call channel_destroy(channel)
  call source_destroy(source)
  call ifunc_destroy(ifunc)
  call keypair_destroy(keypair)
  call worker_destroy(worker)
  call context_destroy(context)
end program
