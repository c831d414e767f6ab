/*
 * write_aftermath.c - how much a trace write slows the program after it returned.
 *
 * Each iteration: optionally write <KiB> to a file, fdatasync it and drop it from the page cache
 * (what a flushing suspension's writer does), sleep 1 ms (the rest of the pause), optionally spin
 * <spin_us> (a longer pause), then time a fixed block of register-only work. Prints the mean time
 * of that block in microseconds. Run two copies at once on a 2-core machine (two ranks) and
 * compare the modes' block times, interleaved: the difference is CPU the program lost after the
 * write, which no reconstruction can see (paper-notes/fidelity.md, "The MPICH guard's residual").
 *
 * Usage: write_aftermath <mode 0=no write | 1=write+sync+dontneed | 2=write+sync>
 *                        <iterations> <spin_us> [KiB, default 1024]
 * Build:  cc -O2 -o write_aftermath write_aftermath.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s mode iterations spin_us [KiB]\n", argv[0]);
        return 2;
    }
    int mode = atoi(argv[1]), n = atoi(argv[2]), spin_us = atoi(argv[3]);
    size_t len = (size_t)(argc > 4 ? atoi(argv[4]) : 1024) << 10;
    char *buf = malloc(len);
    memset(buf, 7, len);
    char name[64];
    snprintf(name, sizeof name, "write_aftermath.%d", getpid());
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || !buf) {
        perror(name);
        return 1;
    }
    unlink(name); /* the data stays reachable through fd until exit */
    double total = 0;
    off_t off = 0;
    volatile double x = 1;
    for (int i = 0; i < n; i++) {
        if (mode) {
            if (pwrite(fd, buf, len, off) != (ssize_t)len) {
                perror("pwrite");
                return 1;
            }
            off += len;
            fdatasync(fd);
            if (mode == 1)
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        usleep(1000);
        if (spin_us) {
            double s = now();
            while (now() - s < spin_us * 1e-6)
                ;
        }
        double a = now();
        for (long k = 0; k < 4000000; k++)
            x = x * 0.999999 + 1e-6;
        total += now() - a;
    }
    printf("%.1f\n", total / n * 1e6);
    return 0;
}
