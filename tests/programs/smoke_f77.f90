! Fortran smoke program using mpif.h-style `use mpi`: known call counts (see tests/smoke.rs).
program smoke_f77
  use mpi
  implicit none
  integer :: ierr, rank, size, i, other, req(2), buf(10), rbuf(10)
  integer :: st(MPI_STATUS_SIZE)
  double precision :: x
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  other = mod(rank + 1, size)
  buf = rank
  x = rank
  do i = 1, 50
    call MPI_Irecv(rbuf, 10, MPI_INTEGER, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, req(1), ierr)
    call MPI_Isend(buf, 4, MPI_INTEGER, other, 3, MPI_COMM_WORLD, req(2), ierr)
    call MPI_Waitall(2, req, MPI_STATUSES_IGNORE, ierr)
    if (rank == 0) then
      call MPI_Send(buf, 2, MPI_INTEGER, 1, i, MPI_COMM_WORLD, ierr)
    else if (rank == 1) then
      call MPI_Recv(rbuf, 10, MPI_INTEGER, 0, MPI_ANY_TAG, MPI_COMM_WORLD, st, ierr)
    end if
    call MPI_Allreduce(MPI_IN_PLACE, x, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  end do
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call MPI_Finalize(ierr)
end program smoke_f77
