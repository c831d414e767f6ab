! fortran_f08.f90 - a few calls through the `use mpi_f08` bindings, whose
! entry points differ from the `use mpi` ones in both Open MPI and MPICH.
! Pairs (0,1), (2,3), ... exchange an array with MPI_Send/MPI_Recv (the
! even rank sends first), then MPI_Bcast from rank 0, MPI_Allreduce, and
! MPI_Reduce to the last rank, which reports through a final MPI_Bcast.
!
! Usage: fortran_f08        (P even; the tests use P = 2)
!
! Exact MPI calls per rank (P ranks), named by their C names:
!   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Send 1, MPI_Recv 1,
!   MPI_Barrier 1, MPI_Bcast 2, MPI_Allreduce 1, MPI_Reduce 1, MPI_Finalize 1
! Totals for P = 2: Bcast 4, every other function 2.
! Peers: partner = ieor(r, 1), tag 4, 6 double precision values (48 bytes).
!
! stdout (rank 0 only): one line with P and the checksum.
program fortran_f08
  use mpi_f08
  implicit none
  integer :: rank, nranks, partner, i
  double precision :: outgoing(6), incoming(6)
  integer :: seed, local_value, global_max, reduced, report
  type(MPI_Status) :: status

  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  if (mod(nranks, 2) /= 0) then
    if (rank == 0) write (0, '(a)') 'fortran_f08 needs an even number of ranks'
    call MPI_Finalize()
    stop 1
  end if
  partner = ieor(rank, 1)
  outgoing = [(dble(rank * 10 + i) * 0.5d0, i = 1, 6)]
  if (mod(rank, 2) == 0) then
    call MPI_Send(outgoing, 6, MPI_DOUBLE_PRECISION, partner, 4, MPI_COMM_WORLD)
    call MPI_Recv(incoming, 6, MPI_DOUBLE_PRECISION, partner, 4, MPI_COMM_WORLD, status)
  else
    call MPI_Recv(incoming, 6, MPI_DOUBLE_PRECISION, partner, 4, MPI_COMM_WORLD, status)
    call MPI_Send(outgoing, 6, MPI_DOUBLE_PRECISION, partner, 4, MPI_COMM_WORLD)
  end if
  call MPI_Barrier(MPI_COMM_WORLD)

  seed = 0
  if (rank == 0) seed = 4242
  call MPI_Bcast(seed, 1, MPI_INTEGER, 0, MPI_COMM_WORLD)
  ! incoming holds multiples of 0.5: the conversion below is exact
  local_value = seed + nint(sum(incoming) * 2.0d0) + rank
  call MPI_Allreduce(local_value, global_max, 1, MPI_INTEGER, MPI_MAX, MPI_COMM_WORLD)
  call MPI_Reduce(local_value, reduced, 1, MPI_INTEGER, MPI_SUM, nranks - 1, MPI_COMM_WORLD)
  report = 0
  if (rank == nranks - 1) report = reduced
  call MPI_Bcast(report, 1, MPI_INTEGER, nranks - 1, MPI_COMM_WORLD)
  if (rank == 0) write (*, '(a,i0,a,i0,a,i0)') 'fortran_f08 ranks=', nranks, ' max=', global_max, &
    ' sum=', report
  call MPI_Finalize()
end program fortran_f08
