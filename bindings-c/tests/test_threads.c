/* Several pthreads share one handle: each sets, reads back and deletes its
 * own keys, reads through both get functions, and all of them increment
 * one shared counter. Every thread's final keys must read back intact and
 * the counter must equal the number of increments. Iterations per thread
 * come from argv[1] (default 20000; fewer under valgrind). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

#define THREADS 8
#define KEYS 500

static segcache_t *cache;
static long iterations = 20000;

struct copy {
    char buf[64];
    size_t len;
};

static void copy_value(const uint8_t *v, size_t n, uint32_t flags, uint64_t cas, void *u) {
    struct copy *c = u;
    (void)flags, (void)cas;
    c->len = n;
    memcpy(c->buf, v, n < sizeof c->buf ? n : sizeof c->buf);
}

/* A thread's own tally: one CHECK per thread at the end, not one per
 * operation, so the closing count stays meaningful. */
#define EXPECT(cond)                                                       \
    do {                                                                   \
        if (!(cond)) {                                                     \
            if (bad++ < 5)                                                 \
                fprintf(stderr, "thread %ld, iteration %ld: %s\n", t, i,   \
                        #cond);                                            \
        }                                                                  \
    } while (0)

static void *worker(void *arg) {
    long t = (long)(intptr_t)arg, bad = 0, i;
    char key[32], value[64], buf[64];
    for (i = 0; i < iterations; i++) {
        long k = i % KEYS;
        int klen = snprintf(key, sizeof key, "t%ld:k%ld", t, k);
        int vlen = snprintf(value, sizeof value, "value-%ld-%ld", t, i);
        EXPECT(segcache_set(cache, (uint8_t *)key, (size_t)klen, (uint8_t *)value,
                            (size_t)vlen, (uint32_t)t, 0) == SEGCACHE_OK);
        size_t len = 0;
        uint32_t flags = 99;
        EXPECT(segcache_get(cache, (uint8_t *)key, (size_t)klen, (uint8_t *)buf,
                            sizeof buf, &len, &flags, NULL) == SEGCACHE_OK);
        EXPECT(len == (size_t)vlen && memcmp(buf, value, len) == 0 && flags == (uint32_t)t);
        if (i % 5 == 0) {
            struct copy c = {{0}, 0};
            EXPECT(segcache_get_with(cache, (uint8_t *)key, (size_t)klen, copy_value, &c) ==
                   SEGCACHE_OK);
            EXPECT(c.len == (size_t)vlen && memcmp(c.buf, value, c.len) == 0);
        }
        if (i % 7 == 0 && i + KEYS < iterations) {
            EXPECT(segcache_delete(cache, (uint8_t *)key, (size_t)klen) == SEGCACHE_OK);
            EXPECT(segcache_contains(cache, (uint8_t *)key, (size_t)klen) ==
                   SEGCACHE_NOT_FOUND);
        }
        EXPECT(segcache_incr(cache, S("counter"), 1, NULL) == SEGCACHE_OK);
    }
    CHECK(bad == 0);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        iterations = strtol(argv[1], NULL, 10);
    }
    if (iterations < KEYS) {
        iterations = KEYS;
    }
    segcache_config_t cfg = segcache_config_default();
    cfg.shards = 8;
    segcache_status_t err;
    cache = segcache_new(&cfg, &err);
    CHECK(cache != NULL);
    if (cache == NULL) {
        return check_summary("test_threads");
    }
    CHECK_ST(segcache_set(cache, S("counter"), S("0"), 0, 0), SEGCACHE_OK);

    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++) {
        CHECK(pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t) == 0);
    }
    for (long t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0);
    }

    /* Each thread's last write to each key is what reads back now. */
    char key[32], value[64], buf[64];
    long mismatches = 0;
    for (long t = 0; t < THREADS; t++) {
        for (long i = iterations - KEYS; i < iterations; i++) {
            int klen = snprintf(key, sizeof key, "t%ld:k%ld", t, i % KEYS);
            int vlen = snprintf(value, sizeof value, "value-%ld-%ld", t, i);
            size_t len = 0;
            segcache_status_t st = segcache_get(cache, (uint8_t *)key, (size_t)klen,
                                                (uint8_t *)buf, sizeof buf, &len, NULL, NULL);
            if (st != SEGCACHE_OK || len != (size_t)vlen || memcmp(buf, value, len) != 0) {
                mismatches++;
            }
        }
    }
    CHECK(mismatches == 0);

    size_t n = 0;
    CHECK_ST(segcache_len(cache, &n), SEGCACHE_OK);
    CHECK(n == THREADS * KEYS + 1);
    uint64_t counter = 0;
    CHECK_ST(segcache_incr(cache, S("counter"), 0, &counter), SEGCACHE_OK);
    CHECK(counter == (uint64_t)THREADS * (uint64_t)iterations);
    segcache_stats_t st;
    CHECK_ST(segcache_stats(cache, &st), SEGCACHE_OK);
    CHECK(st.evictions == 0 && st.shards == 8);
    segcache_free(cache);
    return check_summary("test_threads");
}
