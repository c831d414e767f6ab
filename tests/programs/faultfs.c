/*
 * faultfs.c - LD_PRELOAD fault injection for the tests only (tests/hardening.rs):
 * makes writes and syncs of files under one directory fail the way full quotas
 * and network file systems do, which a tmpfs cannot show.
 *
 *   FAULTFS_DIR=/path            only files whose path starts with this are touched
 *   FAULTFS_WRITE_ERRNO=EDQUOT   pwrite/pwrite64/write fail with it once more than
 *   FAULTFS_WRITE_LIMIT=bytes      this many bytes went to such files (per process)
 *   FAULTFS_SYNC_ERRNO=EIO|ENOSPC|EDQUOT   fdatasync/fsync fail with it ...
 *   FAULTFS_SYNC_FAILURES=k        ... the first k times (per process; default 1)
 *   FAULTFS_SYNC_SKIP=j            ... after letting the first j syncs through
 *   FAULTFS_SYNC_DELAY_MS=t        every sync of such files first sleeps t ms (a hanging disk)
 *
 * Each injected failure prints "faultfs: injected <what>" on stderr, so a test
 * can tell that the fault really happened.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_long written_bytes;
static atomic_long syncs_seen;
static atomic_long syncs_failed;

static int errno_named(const char *name)
{
    if (name == NULL) return 0;
    if (strcmp(name, "EDQUOT") == 0) return EDQUOT;
    if (strcmp(name, "ENOSPC") == 0) return ENOSPC;
    if (strcmp(name, "EIO") == 0) return EIO;
    return 0;
}

static int watched(int fd)
{
    const char *dir = getenv("FAULTFS_DIR");
    if (dir == NULL || *dir == 0) return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return strncmp(path, dir, strlen(dir)) == 0;
}

static void say(const char *what, int fd)
{
    char line[128];
    int n = snprintf(line, sizeof line, "faultfs: injected %s on fd %d\n", what, fd);
    if (n > 0) (void)!write(2, line, (size_t)n);
}

/* Whether a write of len bytes to fd must fail (and with which errno). */
static int write_fault(int fd, size_t len)
{
    int err = errno_named(getenv("FAULTFS_WRITE_ERRNO"));
    if (err == 0 || !watched(fd)) return 0;
    const char *limit = getenv("FAULTFS_WRITE_LIMIT");
    long cap = limit ? atol(limit) : 0;
    long before = atomic_fetch_add(&written_bytes, (long)len);
    if (before + (long)len <= cap) return 0;
    atomic_fetch_sub(&written_bytes, (long)len);
    say(getenv("FAULTFS_WRITE_ERRNO"), fd);
    return err;
}

static int sync_fault(int fd)
{
    const char *delay = getenv("FAULTFS_SYNC_DELAY_MS");
    if (delay != NULL && watched(fd)) {
        say("delay", fd);
        usleep((useconds_t)atol(delay) * 1000u);
    }
    int err = errno_named(getenv("FAULTFS_SYNC_ERRNO"));
    if (err == 0 || !watched(fd)) return 0;
    const char *skip = getenv("FAULTFS_SYNC_SKIP");
    const char *failures = getenv("FAULTFS_SYNC_FAILURES");
    long seen = atomic_fetch_add(&syncs_seen, 1);
    if (seen < (skip ? atol(skip) : 0)) return 0;
    if (atomic_fetch_add(&syncs_failed, 1) >= (failures ? atol(failures) : 1)) return 0;
    say(getenv("FAULTFS_SYNC_ERRNO"), fd);
    return err;
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*sync_fn)(int);
#define REAL(name, type) \
    static type real_##name; \
    if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
    REAL(pwrite64, pwrite_fn);
    int err = write_fault(fd, len);
    if (err) {
        errno = err;
        return -1;
    }
    return real_pwrite64(fd, buf, len, off);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    REAL(pwrite, pwrite_fn);
    int err = write_fault(fd, len);
    if (err) {
        errno = err;
        return -1;
    }
    return real_pwrite(fd, buf, len, off);
}

ssize_t write(int fd, const void *buf, size_t len)
{
    REAL(write, write_fn);
    int err = fd > 2 ? write_fault(fd, len) : 0;
    if (err) {
        errno = err;
        return -1;
    }
    return real_write(fd, buf, len);
}

int fdatasync(int fd)
{
    REAL(fdatasync, sync_fn);
    int err = sync_fault(fd);
    if (err) {
        errno = err;
        return -1;
    }
    return real_fdatasync(fd);
}

int fsync(int fd)
{
    REAL(fsync, sync_fn);
    int err = sync_fault(fd);
    if (err) {
        errno = err;
        return -1;
    }
    return real_fsync(fd);
}
