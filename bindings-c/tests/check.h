/* Minimal test harness shared by the C tests: CHECK counts a passed or a
 * failed assertion (printing the failure), CHECK_ST compares a status, and
 * check_summary() prints the closing "N passed, N failed" line and gives
 * the process exit code. */
#ifndef SEGCACHE_TEST_CHECK_H
#define SEGCACHE_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <segcache.h>

static atomic_long check_passed;
static atomic_long check_failed;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (cond) {                                                        \
            atomic_fetch_add(&check_passed, 1);                            \
        } else {                                                           \
            atomic_fetch_add(&check_failed, 1);                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,         \
                    __LINE__, #cond);                                      \
        }                                                                  \
    } while (0)

#define CHECK_ST(expr, want)                                               \
    do {                                                                   \
        segcache_status_t st_ = (expr);                                    \
        if (st_ == (want)) {                                               \
            atomic_fetch_add(&check_passed, 1);                            \
        } else {                                                           \
            atomic_fetch_add(&check_failed, 1);                            \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s)\n",  \
                    __FILE__, __LINE__, #expr, (int)st_,                   \
                    segcache_strerror(st_), (int)(want),                   \
                    segcache_strerror(want));                              \
        }                                                                  \
    } while (0)

/* Key or value from a C string literal: pointer and length arguments. */
#define S(str) (const uint8_t *)(str), strlen(str)

static int check_summary(const char *name) {
    long p = atomic_load(&check_passed), f = atomic_load(&check_failed);
    fprintf(stderr, "%s: %s\n", name, f ? "FAILED" : "ok");
    printf("%ld passed, %ld failed\n", p, f);
    fflush(stdout);
    return f ? 1 : 0;
}

#endif
