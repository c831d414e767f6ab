! Fortran smoke program using `use mpi_f08`: known call counts (see tests/smoke.rs).
program smoke_f08
  use mpi_f08
  implicit none
  integer :: rank, size, i, other, buf(10), rbuf(10)
  type(MPI_Request) :: req(2)
  type(MPI_Status) :: st
  double precision :: x
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)
  other = mod(rank + 1, size)
  buf = rank
  x = rank
  do i = 1, 50
    call MPI_Irecv(rbuf, 10, MPI_INTEGER, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, req(1))
    call MPI_Isend(buf, 4, MPI_INTEGER, other, 3, MPI_COMM_WORLD, req(2))
    call MPI_Waitall(2, req, MPI_STATUSES_IGNORE)
    if (rank == 0) then
      call MPI_Send(buf, 2, MPI_INTEGER, 1, i, MPI_COMM_WORLD)
    else if (rank == 1) then
      call MPI_Recv(rbuf, 10, MPI_INTEGER, 0, MPI_ANY_TAG, MPI_COMM_WORLD, st)
    end if
    call MPI_Allreduce(MPI_IN_PLACE, x, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD)
  end do
  call MPI_Barrier(MPI_COMM_WORLD)
  call MPI_Finalize()
end program smoke_f08
