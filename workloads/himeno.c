/*
 * himeno.c - a small MPI version of the Himeno benchmark kernel (the
 * paper's program 2): Jacobi iterations of a 19-point stencil for the
 * Poisson equation on an nx x ny x nz grid, split along x into slabs.
 * Every iteration: halo exchange of one y-z plane with each neighbour
 * (MPI_Irecv x2, MPI_Isend x2, MPI_Waitall; the outermost ranks talk to
 * MPI_PROC_NULL so every rank makes the same calls), the stencil sweep,
 * then MPI_Allreduce of the residual gosa. The coefficient arrays make the
 * resident memory about 14 doubles per grid point, as in the original.
 *
 * Usage: himeno [--nx X] [--ny Y] [--nz Z] [--iterations N]
 *   defaults: --nx 65 --ny 33 --nz 33 --iterations 200 (about Himeno "XS");
 *   needs nx - 2 >= P (every rank owns at least one interior plane).
 *
 * MPI calls per rank (N iterations): MPI_Init 1, MPI_Comm_rank 1,
 *   MPI_Comm_size 1, MPI_Barrier 1, MPI_Wtime 2, MPI_Irecv 2N, MPI_Isend 2N,
 *   MPI_Waitall N, MPI_Allreduce N, MPI_Finalize 1.
 *
 * stdout (rank 0): a "himeno ..." line with the settings, the final gosa and
 * MFLOPS (34 flops per interior point, as Himeno counts), then
 * "total_s=<seconds>" from after the start barrier to before MPI_Finalize.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_UP 31
#define TAG_DOWN 32

static long flag_value(int argc, char **argv, const char *flag, long fallback)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], flag) == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", flag);
                exit(2);
            }
            char *end = NULL;
            long v = strtol(argv[i + 1], &end, 10);
            if (end == argv[i + 1] || *end != '\0' || v < 0) {
                fprintf(stderr, "bad value for %s: %s\n", flag, argv[i + 1]);
                exit(2);
            }
            return v;
        }
    }
    return fallback;
}

struct grid {
    long planes; /* local planes including the two ghosts */
    long ny, nz;
    double *p, *bnd, *wrk1, *wrk2, *a[4], *b[3], *c[3];
};

static double *alloc_field(long n, double init)
{
    double *f = malloc((size_t)n * sizeof(double));
    if (f == NULL) {
        fprintf(stderr, "himeno: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < n; i++)
        f[i] = init;
    return f;
}

int main(int argc, char **argv)
{
    long nx = flag_value(argc, argv, "--nx", 65);
    long ny = flag_value(argc, argv, "--ny", 33);
    long nz = flag_value(argc, argv, "--nz", 33);
    long iterations = flag_value(argc, argv, "--iterations", 200);
    if (ny < 3 || nz < 3) {
        fprintf(stderr, "--ny and --nz must be at least 3\n");
        return 2;
    }

    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (nx - 2 < size) {
        if (rank == 0)
            fprintf(stderr, "himeno: --nx must be at least ranks + 2\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* Interior planes 1..nx-2 are shared out as evenly as possible; the
     * global boundary planes 0 and nx-1 stay fixed and live in the ghost
     * slots of the first and last rank. */
    long interior = nx - 2;
    long first = 1 + rank * (interior / size) + (rank < interior % size ? rank : interior % size);
    long owned = interior / size + (rank < interior % size ? 1 : 0);
    int down = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    int up = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;

    struct grid g;
    g.planes = owned + 2;
    g.ny = ny;
    g.nz = nz;
    long plane = ny * nz;
    long points = g.planes * plane;
    g.p = alloc_field(points, 0.0);
    g.bnd = alloc_field(points, 1.0);
    g.wrk1 = alloc_field(points, 0.0);
    g.wrk2 = alloc_field(points, 0.0);
    for (int k = 0; k < 3; k++) {
        g.a[k] = alloc_field(points, 1.0);
        g.b[k] = alloc_field(points, 0.0);
        g.c[k] = alloc_field(points, 1.0);
    }
    g.a[3] = alloc_field(points, 1.0 / 6.0);
    for (long li = 0; li < g.planes; li++) {
        double gi = (double)(first - 1 + li);
        double v = gi * gi / ((double)(nx - 1) * (double)(nx - 1));
        for (long q = 0; q < plane; q++)
            g.p[li * plane + q] = v;
    }

    const double omega = 0.8;
    double gosa = 0.0;
#define AT(f, i, j, k) (f)[((i) * ny + (j)) * nz + (k)]

    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (long it = 0; it < iterations; it++) {
        MPI_Request reqs[4];
        MPI_Status statuses[4];
        MPI_Irecv(&AT(g.p, 0, 0, 0), (int)plane, MPI_DOUBLE, down, TAG_UP, MPI_COMM_WORLD, &reqs[0]);
        MPI_Irecv(&AT(g.p, owned + 1, 0, 0), (int)plane, MPI_DOUBLE, up, TAG_DOWN, MPI_COMM_WORLD, &reqs[1]);
        MPI_Isend(&AT(g.p, owned, 0, 0), (int)plane, MPI_DOUBLE, up, TAG_UP, MPI_COMM_WORLD, &reqs[2]);
        MPI_Isend(&AT(g.p, 1, 0, 0), (int)plane, MPI_DOUBLE, down, TAG_DOWN, MPI_COMM_WORLD, &reqs[3]);
        MPI_Waitall(4, reqs, statuses);

        double local = 0.0;
        for (long i = 1; i <= owned; i++)
            for (long j = 1; j < ny - 1; j++)
                for (long k = 1; k < nz - 1; k++) {
                    double s0 = AT(g.a[0], i, j, k) * AT(g.p, i + 1, j, k) +
                                AT(g.a[1], i, j, k) * AT(g.p, i, j + 1, k) +
                                AT(g.a[2], i, j, k) * AT(g.p, i, j, k + 1) +
                                AT(g.b[0], i, j, k) * (AT(g.p, i + 1, j + 1, k) - AT(g.p, i + 1, j - 1, k) -
                                                       AT(g.p, i - 1, j + 1, k) + AT(g.p, i - 1, j - 1, k)) +
                                AT(g.b[1], i, j, k) * (AT(g.p, i, j + 1, k + 1) - AT(g.p, i, j - 1, k + 1) -
                                                       AT(g.p, i, j + 1, k - 1) + AT(g.p, i, j - 1, k - 1)) +
                                AT(g.b[2], i, j, k) * (AT(g.p, i + 1, j, k + 1) - AT(g.p, i - 1, j, k + 1) -
                                                       AT(g.p, i + 1, j, k - 1) + AT(g.p, i - 1, j, k - 1)) +
                                AT(g.c[0], i, j, k) * AT(g.p, i - 1, j, k) +
                                AT(g.c[1], i, j, k) * AT(g.p, i, j - 1, k) +
                                AT(g.c[2], i, j, k) * AT(g.p, i, j, k - 1) + AT(g.wrk1, i, j, k);
                    double ss = (s0 * AT(g.a[3], i, j, k) - AT(g.p, i, j, k)) * AT(g.bnd, i, j, k);
                    local += ss * ss;
                    AT(g.wrk2, i, j, k) = AT(g.p, i, j, k) + omega * ss;
                }
        for (long i = 1; i <= owned; i++)
            for (long j = 1; j < ny - 1; j++)
                for (long k = 1; k < nz - 1; k++)
                    AT(g.p, i, j, k) = AT(g.wrk2, i, j, k);

        MPI_Allreduce(&local, &gosa, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    double total = MPI_Wtime() - start;
#undef AT

    if (rank == 0) {
        double flops = 34.0 * (double)(nx - 2) * (double)(ny - 2) * (double)(nz - 2) * (double)iterations;
        printf("himeno ranks=%d nx=%ld ny=%ld nz=%ld iterations=%ld gosa=%.9e mflops=%.1f\n", size, nx, ny, nz,
               iterations, gosa, total > 0 ? flops / total / 1e6 : 0.0);
        printf("total_s=%.6f\n", total);
    }
    free(g.p);
    free(g.bnd);
    free(g.wrk1);
    free(g.wrk2);
    for (int k = 0; k < 3; k++) {
        free(g.a[k]);
        free(g.b[k]);
        free(g.c[k]);
    }
    free(g.a[3]);
    MPI_Finalize();
    return 0;
}
