/* Force-included into every program built for Open MPI (scripts/mpich-testsuite.sh). Open MPI 4.1
 * ships MPI-4's persistent collectives, but only under their MPIX_ names from <mpi-ext.h>; the
 * suite's programs call the MPI-4 names. Mapping one onto the other lets the same programs exercise
 * both libraries' persistent collectives (and the recorder's wrappers of both spellings). */
#ifndef EVENFLUSH_OPENMPI_MPIX_H
#define EVENFLUSH_OPENMPI_MPIX_H

#include <mpi.h>
#include <mpi-ext.h>

#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && MPI_VERSION < 4
#define MPI_Barrier_init MPIX_Barrier_init
#define MPI_Bcast_init MPIX_Bcast_init
#define MPI_Gather_init MPIX_Gather_init
#define MPI_Gatherv_init MPIX_Gatherv_init
#define MPI_Scatter_init MPIX_Scatter_init
#define MPI_Scatterv_init MPIX_Scatterv_init
#define MPI_Allgather_init MPIX_Allgather_init
#define MPI_Allgatherv_init MPIX_Allgatherv_init
#define MPI_Alltoall_init MPIX_Alltoall_init
#define MPI_Alltoallv_init MPIX_Alltoallv_init
#define MPI_Alltoallw_init MPIX_Alltoallw_init
#define MPI_Allreduce_init MPIX_Allreduce_init
#define MPI_Reduce_init MPIX_Reduce_init
#define MPI_Reduce_scatter_init MPIX_Reduce_scatter_init
#define MPI_Reduce_scatter_block_init MPIX_Reduce_scatter_block_init
#define MPI_Scan_init MPIX_Scan_init
#define MPI_Exscan_init MPIX_Exscan_init
#define MPI_Neighbor_allgather_init MPIX_Neighbor_allgather_init
#define MPI_Neighbor_allgatherv_init MPIX_Neighbor_allgatherv_init
#define MPI_Neighbor_alltoall_init MPIX_Neighbor_alltoall_init
#define MPI_Neighbor_alltoallv_init MPIX_Neighbor_alltoallv_init
#define MPI_Neighbor_alltoallw_init MPIX_Neighbor_alltoallw_init
#endif

#endif
