! fortran_ring.f90 - ring of blocking sends through the Fortran `use mpi`
! bindings, followed by one MPI_Allreduce. Rank 0 starts each lap (send,
! then receive); the others receive from the left, add their rank and pass
! the token (8 default integers) on.
!
! Usage: fortran_ring [--iterations N]   (default N = 50; P >= 2)
!
! Exact MPI calls per rank (P ranks, N iterations), named by their C names
! (the recorder maps the Fortran entry points onto the same functions):
!   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Send N, MPI_Recv N,
!   MPI_Allreduce 1, MPI_Finalize 1
! Totals for P = 2, N = 50: Send 100, Recv 100, the others 2 each.
! Peers: right = mod(r+1, P), left = mod(r-1+P, P), tag 3, 32 bytes.
!
! stdout (rank 0 only): one line with P, N and the reduced checksum.
program fortran_ring
  use mpi
  implicit none
  integer, parameter :: token_len = 8
  integer :: ierr, rank, nranks, left, right, lap, i, iterations
  integer :: token(token_len)
  integer :: status(MPI_STATUS_SIZE)
  integer :: local_sum, global_sum

  iterations = iterations_from_command_line(50)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  if (nranks < 2) then
    if (rank == 0) write (0, '(a)') 'fortran_ring needs at least 2 ranks'
    call MPI_Finalize(ierr)
    stop 1
  end if
  right = mod(rank + 1, nranks)
  left = mod(rank - 1 + nranks, nranks)
  token = [(i, i = 1, token_len)]

  do lap = 1, iterations
    if (rank == 0) then
      token = mod(token * 31 + lap, 1000003)
      call MPI_Send(token, token_len, MPI_INTEGER, right, 3, MPI_COMM_WORLD, ierr)
      call MPI_Recv(token, token_len, MPI_INTEGER, left, 3, MPI_COMM_WORLD, status, ierr)
    else
      call MPI_Recv(token, token_len, MPI_INTEGER, left, 3, MPI_COMM_WORLD, status, ierr)
      token = mod(token * 31 + rank, 1000003)
      call MPI_Send(token, token_len, MPI_INTEGER, right, 3, MPI_COMM_WORLD, ierr)
    end if
  end do

  local_sum = mod(sum(token) + rank, 1000003)
  call MPI_Allreduce(local_sum, global_sum, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) write (*, '(a,i0,a,i0,a,i0)') 'fortran_ring ranks=', nranks, ' iterations=', &
    iterations, ' checksum=', global_sum
  call MPI_Finalize(ierr)

contains

  integer function iterations_from_command_line(fallback) result(n)
    integer, intent(in) :: fallback
    character(len=64) :: arg
    integer :: k, stat
    n = fallback
    do k = 1, command_argument_count() - 1
      call get_command_argument(k, arg)
      if (trim(arg) == '--iterations') then
        call get_command_argument(k + 1, arg)
        read (arg, *, iostat=stat) n
        if (stat /= 0 .or. n < 0) then
          write (0, '(a)') 'bad value for --iterations'
          stop 2
        end if
      end if
    end do
  end function iterations_from_command_line

end program fortran_ring
