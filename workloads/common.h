/*
 * Helpers shared by the bundled programs (workloads/ and tests/programs/). Kept header-only so every
 * program still builds from a single source file plus this header.
 */
#ifndef EVENFLUSH_WORKLOADS_COMMON_H
#define EVENFLUSH_WORKLOADS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Value of "--flag N" on the command line, or fallback when absent.
 * Bad values stop the program before MPI_Init so a typo never runs a
 * half-configured job. */
static inline long flag_value(int argc, char **argv, const char *flag, long fallback)
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

/* FNV-1a style folding: cheap, order-sensitive, identical on every MPI. */
static inline uint64_t fold64(uint64_t hash, uint64_t value)
{
    return (hash ^ value) * 1099511628211ULL;
}

#define FOLD_SEED 14695981039346656037ULL

#endif
