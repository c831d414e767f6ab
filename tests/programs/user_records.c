/*
 * user_records.c - user events through the recorder's C API, looked up at
 * run time with dlsym(RTLD_DEFAULT, ...) so the same binary runs without the
 * recorder. Whether the functions were found goes to stderr only; stdout is
 * identical with and without the recorder.
 *
 * Prototypes (provided by recorder/include/evenflush.h):
 *   void evenflush_record(const char *name, const void *data, size_t len);
 *   void evenflush_region_begin(const char *name);
 *   void evenflush_region_end(const char *name);
 *
 * Usage: user_records [--iterations N]   (default N = 3)
 *
 * Per iteration: region "iteration" begins; inside it a nested region
 * "payloads" holds one evenflush_record per size in PAYLOAD_SIZES
 * (0, 1, 7, 64, 4096, 65536, 1048576 bytes; names "payload-<bytes>"), then
 * "payloads" ends, one more record "iteration-summary" of 16 bytes, region
 * "iteration" ends, and an MPI_Barrier.
 *
 * Exact MPI calls per rank (P ranks, N iterations):
 *   MPI_Init 1, MPI_Comm_rank 1, MPI_Comm_size 1, MPI_Barrier N,
 *   MPI_Allreduce 1, MPI_Finalize 1
 * User events per rank when the recorder is present (none otherwise):
 *   evenflush_record 8N (7 payloads + 1 summary), evenflush_region_begin 2N,
 *   evenflush_region_end 2N; record bytes per iteration = 1118280 + 16.
 *
 * stdout (rank 0 only): the sum over ranks of the payload checksums.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include "common.h"

typedef void (*record_fn)(const char *name, const void *data, size_t len);
typedef void (*region_fn)(const char *name);

static const size_t PAYLOAD_SIZES[] = {0, 1, 7, 64, 4096, 65536, 1048576};
#define PAYLOAD_KINDS (sizeof PAYLOAD_SIZES / sizeof PAYLOAD_SIZES[0])
#define LARGEST_PAYLOAD 1048576

static record_fn record_ptr;
static region_fn region_begin_ptr;
static region_fn region_end_ptr;

static void resolve(void)
{
    /* Casting dlsym's object pointer to a function pointer is what POSIX
     * requires dlsym to support. */
    *(void **)&record_ptr = dlsym(RTLD_DEFAULT, "evenflush_record");
    *(void **)&region_begin_ptr = dlsym(RTLD_DEFAULT, "evenflush_region_begin");
    *(void **)&region_end_ptr = dlsym(RTLD_DEFAULT, "evenflush_region_end");
}

static void record(const char *name, const void *data, size_t len)
{
    if (record_ptr != NULL)
        record_ptr(name, data, len);
}

static void region_begin(const char *name)
{
    if (region_begin_ptr != NULL)
        region_begin_ptr(name);
}

static void region_end(const char *name)
{
    if (region_end_ptr != NULL)
        region_end_ptr(name);
}

int main(int argc, char **argv)
{
    long iterations = flag_value(argc, argv, "--iterations", 3);
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    resolve();
    if (rank == 0)
        fprintf(stderr, "user_records: evenflush_record %s, evenflush_region_begin %s, evenflush_region_end %s\n",
                record_ptr ? "found" : "not found", region_begin_ptr ? "found" : "not found",
                region_end_ptr ? "found" : "not found");

    unsigned char *payload = malloc(LARGEST_PAYLOAD);
    if (payload == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t hash = FOLD_SEED;
    for (long it = 0; it < iterations; it++) {
        region_begin("iteration");
        region_begin("payloads");
        for (size_t k = 0; k < PAYLOAD_KINDS; k++) {
            size_t len = PAYLOAD_SIZES[k];
            for (size_t i = 0; i < len; i++)
                payload[i] = (unsigned char)(i * 31 + k * 7 + (size_t)it * 3 + (size_t)rank);
            char name[32];
            snprintf(name, sizeof name, "payload-%zu", len);
            record(name, payload, len);
            /* Folding a stride of the bytes keeps the checksum cheap but still
             * sensitive to every payload. */
            for (size_t i = 0; i < len; i += 61)
                hash = fold64(hash, payload[i]);
            hash = fold64(hash, len);
        }
        region_end("payloads");
        uint64_t summary[2] = {(uint64_t)it, hash};
        record("iteration-summary", summary, sizeof summary);
        region_end("iteration");
        MPI_Barrier(MPI_COMM_WORLD);
    }

    uint64_t global = 0;
    MPI_Allreduce(&hash, &global, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("user_records ranks=%d iterations=%ld checksum=%016llx\n", size, iterations,
               (unsigned long long)global);
    free(payload);
    MPI_Finalize();
    return 0;
}
