/* Every function of segcache.h, its happy path and every error path:
 * NULL handle, NULL key with a nonzero length, empty key, key longer than
 * SEGCACHE_MAX_KEY_LEN, value too large, buffer too small, bad lengths,
 * bad TTLs and bad configuration values. Prints "N passed, N failed". */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static segcache_t *make(size_t heap, size_t seg, size_t shards, const char *ev) {
    segcache_config_t cfg = segcache_config_default();
    cfg.heap_size = heap;
    cfg.segment_size = seg;
    cfg.shards = shards;
    cfg.eviction = ev;
    segcache_status_t err = SEGCACHE_PANIC;
    segcache_t *c = segcache_new(&cfg, &err);
    CHECK(c != NULL);
    CHECK_ST(err, SEGCACHE_OK);
    return c;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* --- configuration, new, free ------------------------------------------ */

static segcache_status_t new_status(segcache_config_t cfg) {
    segcache_status_t err = SEGCACHE_OK;
    segcache_t *c = segcache_new(&cfg, &err);
    if (c != NULL) {
        segcache_free(c);
        return SEGCACHE_OK;
    }
    return err;
}

/* segcache_last_error() says "invalid <field>: <why>". */
static int names_field(const char *field) {
    const char *msg = segcache_last_error();
    char want[64];
    snprintf(want, sizeof want, "invalid %s: ", field);
    if (strncmp(msg, want, strlen(want)) == 0 && strlen(msg) > strlen(want))
        return 1;
    fprintf(stderr, "segcache_last_error() = \"%s\", want \"%s...\"\n", msg, want);
    return 0;
}

static void test_config(void) {
    segcache_config_t d = segcache_config_default();
    CHECK(d.heap_size == 64u << 20);
    CHECK(d.segment_size == 0); /* the core picks it per shard */
    CHECK(d.hash_power == 0);
    CHECK(d.shards == 0);
    CHECK(d.eviction == NULL);
    CHECK_ST(new_status(d), SEGCACHE_OK);

    /* NULL config: NULL handle and INVALID_ARGUMENT; err itself optional. */
    segcache_status_t err = SEGCACHE_OK;
    CHECK(segcache_new(NULL, &err) == NULL);
    CHECK_ST(err, SEGCACHE_INVALID_ARGUMENT);
    CHECK(segcache_new(NULL, NULL) == NULL);
    segcache_t *c = segcache_new(&d, NULL);
    CHECK(c != NULL);
    segcache_free(c);

    segcache_config_t bad;
#define BAD(field, value)                                                  \
    do {                                                                   \
        bad = segcache_config_default();                                   \
        bad.field = value;                                                 \
        CHECK_ST(new_status(bad), SEGCACHE_INVALID_CONFIG);                \
        CHECK(names_field(#field));                                        \
    } while (0)
    BAD(heap_size, 0);
    BAD(heap_size, 8u << 10); /* two 4 KiB segments: three are needed */
    BAD(heap_size, SIZE_MAX); /* more segments than the table can name */
    BAD(segment_size, 1000);     /* below 1 KiB */
    BAD(segment_size, 4100);     /* not a multiple of 8 */
    BAD(segment_size, 4u << 20); /* above 2 MiB */
    BAD(hash_power, 1);
    BAD(hash_power, 2);
    BAD(hash_power, 31);
    BAD(hash_power, 256 + 16); /* would be 16 if truncated to a byte */
    BAD(shards, 3);
    BAD(shards, 2048);
    BAD(eviction, "lru");
    BAD(eviction, "");
    BAD(eviction, "\xff");
#undef BAD
    /* Enough for one shard but not for 4 (3 segments each). */
    bad = segcache_config_default();
    bad.heap_size = 8u << 20;
    bad.segment_size = 1u << 20;
    bad.shards = 4;
    CHECK_ST(new_status(bad), SEGCACHE_INVALID_CONFIG);
    CHECK(names_field("heap_size")); /* "per shard (4 shards): ..." */
    /* A success leaves the last message alone; a NULL config replaces it. */
    CHECK_ST(new_status(segcache_config_default()), SEGCACHE_OK);
    CHECK(names_field("heap_size"));
    CHECK(segcache_new(NULL, NULL) == NULL);
    CHECK(strstr(segcache_last_error(), "NULL") != NULL);

    const char *names[] = {"merge", "none",  "random",      "random_fifo",
                           "fifo",  "cte",   "util",        "MERGE",
                           "Random-FIFO"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        segcache_config_t ok = segcache_config_default();
        ok.eviction = names[i];
        ok.heap_size = 8u << 20;
        ok.shards = 1;
        ok.hash_power = 10;
        CHECK_ST(new_status(ok), SEGCACHE_OK);
    }
    segcache_config_t ok = segcache_config_default();
    ok.shards = 4;
    ok.heap_size = 16u << 20;
    ok.hash_power = 12; /* the whole table's power, split over the shards */
    CHECK_ST(new_status(ok), SEGCACHE_OK);

    segcache_free(NULL); /* a no-op, like free(NULL) */
    CHECK(1);
}

/* --- strerror ------------------------------------------------------------ */

static void test_strerror(void) {
    for (int i = SEGCACHE_OK; i <= SEGCACHE_INTERNAL; i++) {
        const char *m = segcache_strerror(i);
        CHECK(m != NULL && m[0] != '\0' && strcmp(m, "unknown status") != 0);
        for (int j = SEGCACHE_OK; j < i; j++) {
            CHECK(strcmp(m, segcache_strerror(j)) != 0);
        }
    }
    CHECK(strcmp(segcache_strerror(SEGCACHE_OK), "ok") == 0);
    CHECK(strstr(segcache_strerror(SEGCACHE_BUFFER_TOO_SMALL), "buffer") != NULL);
    CHECK(strcmp(segcache_strerror(-1), "unknown status") == 0);
    CHECK(strcmp(segcache_strerror(999), "unknown status") == 0);
}

/* --- set / get / get_with -------------------------------------------------- */

struct seen {
    int calls;
    uint8_t value[64];
    size_t len;
    uint32_t flags;
    uint64_t cas;
};

static void remember(const uint8_t *value, size_t len, uint32_t flags, uint64_t cas,
                     void *user) {
    struct seen *s = user;
    s->calls++;
    s->len = len;
    s->flags = flags;
    s->cas = cas;
    if (len <= sizeof s->value) {
        memcpy(s->value, value, len);
    }
}

static void remember_value(const uint8_t *value, size_t len, uint32_t flags, void *user) {
    remember(value, len, flags, 0, user);
}

static void test_set_get(segcache_t *c) {
    uint8_t buf[64];
    size_t len = 0;
    uint32_t flags = 0;
    uint64_t cas = 0;

    CHECK_ST(segcache_set(c, S("greeting"), S("hello"), 42, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get(c, S("greeting"), buf, sizeof buf, &len, &flags, &cas),
             SEGCACHE_OK);
    CHECK(len == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK(flags == 42);
    uint64_t first_cas = cas;
    /* A rewrite gets a new token. */
    CHECK_ST(segcache_set(c, S("greeting"), S("hello"), 42, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get(c, S("greeting"), buf, sizeof buf, NULL, NULL, &cas),
             SEGCACHE_OK);
    CHECK(cas != first_cas);

    /* Binary values with NULs; all out pointers optional. */
    const uint8_t bin[5] = {0, 1, 0, 255, 0};
    CHECK_ST(segcache_set(c, S("bin"), bin, sizeof bin, 0, 0), SEGCACHE_OK);
    memset(buf, 0xAA, sizeof buf);
    CHECK_ST(segcache_get(c, S("bin"), buf, sizeof buf, &len, NULL, NULL), SEGCACHE_OK);
    CHECK(len == 5 && memcmp(buf, bin, 5) == 0 && buf[5] == 0xAA);
    CHECK_ST(segcache_get(c, S("bin"), buf, sizeof buf, NULL, NULL, NULL), SEGCACHE_OK);

    /* Empty value, given as NULL with length 0. */
    CHECK_ST(segcache_set(c, S("empty"), NULL, 0, 7, 0), SEGCACHE_OK);
    len = 99;
    CHECK_ST(segcache_get(c, S("empty"), NULL, 0, &len, &flags, NULL), SEGCACHE_OK);
    CHECK(len == 0 && flags == 7);

    /* Buffer too small: the needed length comes back, nothing is copied. */
    memset(buf, 0xAA, sizeof buf);
    len = 0;
    flags = 0;
    CHECK_ST(segcache_get(c, S("greeting"), buf, 3, &len, &flags, &cas),
             SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 5 && flags == 42 && buf[0] == 0xAA);
    len = 0;
    CHECK_ST(segcache_get(c, S("greeting"), NULL, 0, &len, NULL, NULL),
             SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(len == 5);
    CHECK_ST(segcache_get(c, S("greeting"), buf, 5, &len, NULL, NULL), SEGCACHE_OK);
    CHECK(memcmp(buf, "hello", 5) == 0);
    /* NULL buffer with a nonzero length. */
    CHECK_ST(segcache_get(c, S("greeting"), NULL, 8, &len, NULL, NULL),
             SEGCACHE_INVALID_ARGUMENT);

    /* Miss: out values untouched. */
    len = 1234;
    CHECK_ST(segcache_get(c, S("nobody"), buf, sizeof buf, &len, &flags, &cas),
             SEGCACHE_NOT_FOUND);
    CHECK(len == 1234);

    /* Zero-copy get. */
    struct seen s = {0};
    CHECK_ST(segcache_get_with(c, S("greeting"), remember, &s), SEGCACHE_OK);
    CHECK(s.calls == 1 && s.len == 5 && memcmp(s.value, "hello", 5) == 0);
    CHECK(s.flags == 42 && s.cas == cas);
    CHECK_ST(segcache_get_with(c, S("empty"), remember, &s), SEGCACHE_OK);
    CHECK(s.calls == 2 && s.len == 0 && s.flags == 7);
    CHECK_ST(segcache_get_with(c, S("nobody"), remember, &s), SEGCACHE_NOT_FOUND);
    CHECK(s.calls == 2);
    CHECK_ST(segcache_get_with(c, S("greeting"), NULL, &s), SEGCACHE_INVALID_ARGUMENT);
    CHECK(s.calls == 2);

    /* Zero-copy get of the value and flags only. */
    struct seen v = {0};
    v.cas = 99;
    CHECK_ST(segcache_get_value_with(c, S("greeting"), remember_value, &v), SEGCACHE_OK);
    CHECK(v.calls == 1 && v.len == 5 && memcmp(v.value, "hello", 5) == 0);
    CHECK(v.flags == 42 && v.cas == 0);
    CHECK_ST(segcache_get_value_with(c, S("empty"), remember_value, &v), SEGCACHE_OK);
    CHECK(v.calls == 2 && v.len == 0 && v.flags == 7);
    CHECK_ST(segcache_get_value_with(c, S("nobody"), remember_value, &v), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_get_value_with(c, S("greeting"), NULL, &v), SEGCACHE_INVALID_ARGUMENT);
    CHECK(v.calls == 2);

    /* The longest key works. */
    uint8_t key[SEGCACHE_MAX_KEY_LEN];
    memset(key, 'k', sizeof key);
    CHECK_ST(segcache_set(c, key, sizeof key, S("long"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_get(c, key, sizeof key, buf, sizeof buf, &len, NULL, NULL),
             SEGCACHE_OK);
    CHECK(len == 4 && memcmp(buf, "long", 4) == 0);
}

/* --- add / replace / cas / append / prepend -------------------------------- */

static void expect_value(segcache_t *c, const char *key, const char *want) {
    uint8_t buf[128];
    size_t len = 0;
    CHECK_ST(segcache_get(c, S(key), buf, sizeof buf, &len, NULL, NULL), SEGCACHE_OK);
    CHECK(len == strlen(want) && memcmp(buf, want, len) == 0);
}

static void test_conditional_stores(segcache_t *c) {
    CHECK_ST(segcache_add(c, S("a"), S("1"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_add(c, S("a"), S("2"), 0, 0), SEGCACHE_NOT_STORED);
    expect_value(c, "a", "1");

    CHECK_ST(segcache_replace(c, S("r"), S("1"), 0, 0), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_contains(c, S("r")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_replace(c, S("a"), S("3"), 5, 0), SEGCACHE_OK);
    expect_value(c, "a", "3");

    uint64_t token = 0;
    CHECK_ST(segcache_get(c, S("a"), NULL, 0, NULL, NULL, &token),
             SEGCACHE_BUFFER_TOO_SMALL);
    CHECK_ST(segcache_cas(c, S("a"), S("4"), 0, 0, token), SEGCACHE_OK);
    expect_value(c, "a", "4");
    CHECK_ST(segcache_cas(c, S("a"), S("5"), 0, 0, token), SEGCACHE_EXISTS);
    expect_value(c, "a", "4");
    CHECK_ST(segcache_cas(c, S("cas-missing"), S("5"), 0, 0, token), SEGCACHE_NOT_FOUND);

    CHECK_ST(segcache_set(c, S("s"), S("mid"), 9, 0), SEGCACHE_OK);
    CHECK_ST(segcache_append(c, S("s"), S("-end")), SEGCACHE_OK);
    CHECK_ST(segcache_prepend(c, S("s"), S("start-")), SEGCACHE_OK);
    CHECK_ST(segcache_append(c, S("s"), NULL, 0), SEGCACHE_OK);
    expect_value(c, "s", "start-mid-end");
    uint32_t flags = 0;
    CHECK_ST(segcache_get(c, S("s"), NULL, 0, NULL, &flags, NULL),
             SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(flags == 9);
    CHECK_ST(segcache_append(c, S("nobody"), S("x")), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_prepend(c, S("nobody"), S("x")), SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_append(c, S("s"), NULL, 3), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_prepend(c, S("s"), NULL, 3), SEGCACHE_INVALID_ARGUMENT);
    expect_value(c, "s", "start-mid-end");
}

/* segcache_store: every mode, an optional compare, the new token out. */
static void test_store(segcache_t *c) {
    uint64_t t1 = 0, t2 = 0, now = 0;
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_REPLACE, S("st"), S("x"), 0, 0, NULL, NULL),
             SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_PREPEND, S("st"), S("x"), 0, 0, NULL, NULL),
             SEGCACHE_NOT_STORED);
    CHECK_ST(segcache_contains(c, S("st")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_ADD, S("st"), S("mid"), 7, 60, NULL, &t1),
             SEGCACHE_OK);
    CHECK_ST(segcache_get(c, S("st"), NULL, 0, NULL, NULL, &now), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(t1 == now);
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_ADD, S("st"), S("x"), 0, 0, NULL, NULL),
             SEGCACHE_NOT_STORED);
    /* Append and prepend keep the item's flags and TTL, whatever is passed. */
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_APPEND, S("st"), S(">"), 1, 5, NULL, NULL),
             SEGCACHE_OK);
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_PREPEND, S("st"), S("<"), 1, 5, NULL, &t2),
             SEGCACHE_OK);
    expect_value(c, "st", "<mid>");
    uint32_t flags = 0;
    int64_t ttl = 0;
    CHECK_ST(segcache_get(c, S("st"), NULL, 0, NULL, &flags, &now), SEGCACHE_BUFFER_TOO_SMALL);
    CHECK(flags == 7 && now == t2 && t2 != t1);
    CHECK_ST(segcache_ttl(c, S("st"), &ttl), SEGCACHE_OK);
    CHECK(ttl > 5 && ttl <= 60);
    /* A stale token changes nothing; the current one stores. */
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_SET, S("st"), S("no"), 0, 0, &t1, NULL),
             SEGCACHE_EXISTS);
    expect_value(c, "st", "<mid>");
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_REPLACE, S("st"), S("yes"), 0, 0, &t2, &t1),
             SEGCACHE_OK);
    expect_value(c, "st", "yes");
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_SET, S("st-gone"), S("x"), 0, 0, &t1, NULL),
             SEGCACHE_NOT_FOUND);
    /* Unknown modes and bad arguments are refused before anything changes. */
    CHECK_ST(segcache_store(c, 5, S("st"), S("x"), 0, 0, NULL, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_store(c, (segcache_store_mode_t)-1, S("st"), S("x"), 0, 0, NULL, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_SET, S("st"), NULL, 2, 0, 0, NULL, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_store(c, SEGCACHE_STORE_SET, S("st"), S("x"), 0, -1, NULL, NULL),
             SEGCACHE_TTL_OUT_OF_RANGE);
    CHECK_ST(segcache_store(NULL, SEGCACHE_STORE_SET, S("st"), S("x"), 0, 0, NULL, NULL),
             SEGCACHE_INVALID_ARGUMENT);
    expect_value(c, "st", "yes");
}

/* --- incr / decr ------------------------------------------------------------ */

static void test_arith(segcache_t *c) {
    uint64_t n = 0;
    CHECK_ST(segcache_set(c, S("n"), S("41"), 3, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, S("n"), 1, &n), SEGCACHE_OK);
    CHECK(n == 42);
    expect_value(c, "n", "42");
    CHECK_ST(segcache_incr(c, S("n"), 8, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_decr(c, S("n"), 10, &n), SEGCACHE_OK);
    CHECK(n == 40);
    CHECK_ST(segcache_decr(c, S("n"), 100, &n), SEGCACHE_OK);
    CHECK(n == 0);
    CHECK_ST(segcache_decr(c, S("n"), 1, NULL), SEGCACHE_OK);
    expect_value(c, "n", "0");
    CHECK_ST(segcache_set(c, S("max"), S("18446744073709551615"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, S("max"), 2, &n), SEGCACHE_OK);
    CHECK(n == 1);
    CHECK_ST(segcache_set(c, S("text"), S("abc"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_incr(c, S("text"), 1, &n), SEGCACHE_NOT_NUMERIC);
    CHECK_ST(segcache_decr(c, S("text"), 1, &n), SEGCACHE_NOT_NUMERIC);
    expect_value(c, "text", "abc");
    CHECK_ST(segcache_incr(c, S("nobody"), 1, &n), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_decr(c, S("nobody"), 1, &n), SEGCACHE_NOT_FOUND);
}

/* --- ttl / touch / delete / contains -------------------------------------- */

static void test_ttl_touch_delete(segcache_t *c) {
    int64_t t = 0;
    CHECK_ST(segcache_set(c, S("forever"), S("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_ttl(c, S("forever"), &t), SEGCACHE_OK);
    CHECK(t == SEGCACHE_TTL_NEVER);
    CHECK_ST(segcache_ttl(c, S("forever"), NULL), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, S("soon"), S("v"), 0, 100), SEGCACHE_OK);
    CHECK_ST(segcache_ttl(c, S("soon"), &t), SEGCACHE_OK);
    CHECK(t > 0 && t <= 100);
    CHECK_ST(segcache_set(c, S("max-ttl"), S("v"), 0, SEGCACHE_MAX_TTL), SEGCACHE_OK);
    CHECK_ST(segcache_ttl(c, S("max-ttl"), &t), SEGCACHE_OK);
    CHECK(t > SEGCACHE_MAX_TTL - 100000 && t <= SEGCACHE_MAX_TTL);
    CHECK_ST(segcache_ttl(c, S("nobody"), &t), SEGCACHE_NOT_FOUND);

    /* Out-of-range TTLs change nothing. */
    const int64_t bad[] = {-1, -100, INT64_MIN, (int64_t)SEGCACHE_MAX_TTL + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_ST(segcache_set(c, S("forever"), S("x"), 0, bad[i]),
                 SEGCACHE_TTL_OUT_OF_RANGE);
        CHECK_ST(segcache_add(c, S("ttl-add"), S("x"), 0, bad[i]),
                 SEGCACHE_TTL_OUT_OF_RANGE);
        CHECK_ST(segcache_replace(c, S("forever"), S("x"), 0, bad[i]),
                 SEGCACHE_TTL_OUT_OF_RANGE);
        CHECK_ST(segcache_cas(c, S("forever"), S("x"), 0, bad[i], 0),
                 SEGCACHE_TTL_OUT_OF_RANGE);
        CHECK_ST(segcache_touch(c, S("forever"), bad[i]), SEGCACHE_TTL_OUT_OF_RANGE);
    }
    expect_value(c, "forever", "v");
    CHECK_ST(segcache_contains(c, S("ttl-add")), SEGCACHE_NOT_FOUND);

    CHECK_ST(segcache_touch(c, S("forever"), 50), SEGCACHE_OK);
    CHECK_ST(segcache_ttl(c, S("forever"), &t), SEGCACHE_OK);
    CHECK(t > 0 && t <= 50);
    expect_value(c, "forever", "v");
    CHECK_ST(segcache_touch(c, S("forever"), 0), SEGCACHE_OK);
    CHECK_ST(segcache_ttl(c, S("forever"), &t), SEGCACHE_OK);
    CHECK(t == SEGCACHE_TTL_NEVER);
    CHECK_ST(segcache_touch(c, S("nobody"), 10), SEGCACHE_NOT_FOUND);

    CHECK_ST(segcache_contains(c, S("forever")), SEGCACHE_OK);
    CHECK_ST(segcache_delete(c, S("forever")), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, S("forever")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_delete(c, S("forever")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_get(c, S("forever"), NULL, 0, NULL, NULL, NULL), SEGCACHE_NOT_FOUND);
}

/* --- len / stats / max_value_len / value too large ------------------------ */

static void test_sizes_and_stats(void) {
    segcache_t *c = make(16u << 20, 64u << 10, 2, NULL);
    size_t n = 99;
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 0);
    CHECK_ST(segcache_len(c, NULL), SEGCACHE_INVALID_ARGUMENT);

    size_t max = 0;
    CHECK_ST(segcache_max_value_len(c, 3, &max), SEGCACHE_OK);
    CHECK(max > 60000 && max < (64u << 10));
    CHECK_ST(segcache_max_value_len(c, SEGCACHE_MAX_KEY_LEN + 1, &max),
             SEGCACHE_KEY_TOO_LONG);
    CHECK_ST(segcache_max_value_len(c, 3, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_max_value_len(NULL, 3, &max), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_max_value_len(c, 3, &max), SEGCACHE_OK);

    uint8_t *big = calloc(max + 1, 1);
    CHECK(big != NULL);
    CHECK_ST(segcache_set(c, S("big"), big, max, 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_set(c, S("big"), big, max + 1, 0, 0), SEGCACHE_VALUE_TOO_LARGE);
    CHECK_ST(segcache_set(c, S("big"), big, max, 1, 0), SEGCACHE_VALUE_TOO_LARGE);
    CHECK_ST(segcache_add(c, S("big2"), big, max + 1, 0, 0), SEGCACHE_VALUE_TOO_LARGE);
    CHECK_ST(segcache_append(c, S("big"), S("x")), SEGCACHE_VALUE_TOO_LARGE);
    size_t len = 0;
    CHECK_ST(segcache_get(c, S("big"), big, max + 1, &len, NULL, NULL), SEGCACHE_OK);
    CHECK(len == max);
    free(big);

    /* Lengths above PTRDIFF_MAX are rejected before any memory is read. */
    CHECK_ST(segcache_set(c, S("huge"), (const uint8_t *)"x", SIZE_MAX, 0, 0),
             SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_set(c, S("huge"), NULL, 10, 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_append(c, S("big"), (const uint8_t *)"x", SIZE_MAX),
             SEGCACHE_INVALID_ARGUMENT);

    CHECK_ST(segcache_set(c, S("k1"), S("v1"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 2);
    CHECK_ST(segcache_get(c, S("k1"), NULL, 0, NULL, NULL, NULL),
             SEGCACHE_BUFFER_TOO_SMALL);
    CHECK_ST(segcache_get(c, S("k2"), NULL, 0, NULL, NULL, NULL), SEGCACHE_NOT_FOUND);

    segcache_stats_t st;
    memset(&st, 0xFF, sizeof st);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.items == 2);
    CHECK(st.hits == 2 && st.misses == 1);
    CHECK(st.heap_bytes == 16u << 20);
    CHECK(st.shards == 2);
    CHECK(st.segments_used >= 1 && st.segments_used + st.segments_free == 256);
    CHECK(st.live_bytes > max);
    CHECK(st.total_bytes ==
          st.heap_bytes + st.hash_table_bytes + st.segment_header_bytes + st.admission_bytes);
    CHECK(st.evictions == 0 && st.expirations == 0);
    CHECK_ST(segcache_stats(c, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_stats(NULL, &st), SEGCACHE_INVALID_ARGUMENT);

    CHECK_ST(segcache_clear(c), SEGCACHE_OK);
    CHECK_ST(segcache_len(c, &n), SEGCACHE_OK);
    CHECK(n == 0);
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.items == 0 && st.hits == 2);
    segcache_free(c);
}

/* --- memory pressure: eviction, out of memory, hash table full ------------ */

static void test_pressure(void) {
    char key[32];
    uint8_t value[200];
    memset(value, 'v', sizeof value);

    /* Merge eviction: writes never fail, old items make room. */
    segcache_t *c = make(64u << 10, 4096, 1, "merge");
    int stored = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "evict:%d", i);
        stored += segcache_set(c, S(key), value, sizeof value, 0, 0) == SEGCACHE_OK;
    }
    CHECK(stored == 5000);
    segcache_stats_t st;
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.evictions > 0 && st.items < 5000);
    CHECK(st.live_bytes <= st.heap_bytes);
    uint8_t buf[256];
    size_t len = 0;
    CHECK_ST(segcache_get(c, S("evict:4999"), buf, sizeof buf, &len, NULL, NULL),
             SEGCACHE_OK);
    CHECK(len == sizeof value && memcmp(buf, value, len) == 0);
    segcache_free(c);

    /* No eviction: the heap fills up and writes fail; old items stay. */
    c = make(64u << 10, 4096, 1, "none");
    segcache_status_t st_last = SEGCACHE_OK;
    int i = 0;
    for (; i < 5000 && st_last == SEGCACHE_OK; i++) {
        snprintf(key, sizeof key, "full:%d", i);
        st_last = segcache_set(c, S(key), value, sizeof value, 0, 0);
    }
    CHECK_ST(st_last, SEGCACHE_OUT_OF_MEMORY);
    CHECK(i > 100);
    CHECK_ST(segcache_contains(c, S("full:0")), SEGCACHE_OK);
    segcache_free(c);

    /* No eviction and a tiny starting table: the table grows while the
     * heap has room, so every small item is kept. */
    segcache_config_t cfg = segcache_config_default();
    cfg.heap_size = 4u << 20;
    cfg.segment_size = 64u << 10;
    cfg.shards = 1;
    cfg.hash_power = 3;
    cfg.eviction = "none";
    c = segcache_new(&cfg, NULL);
    CHECK(c != NULL);
    st_last = SEGCACHE_OK;
    for (i = 0; i < 5000 && st_last == SEGCACHE_OK; i++) {
        snprintf(key, sizeof key, "tbl:%d", i);
        st_last = segcache_set(c, S(key), S("v"), 0, 0);
    }
    CHECK_ST(st_last, SEGCACHE_OK);
    CHECK(i == 5000);
    CHECK_ST(segcache_contains(c, S("tbl:0")), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, S("tbl:4999")), SEGCACHE_OK);
    segcache_free(c);
}

/* --- expiry and flushing (sleeps ~2.2 s once) ----------------------------- */

static void test_expiry_and_flush(void) {
    segcache_t *c = make(16u << 20, 64u << 10, 2, NULL);
    segcache_t *f = make(16u << 20, 64u << 10, 2, NULL);
    char key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "short:%d", i);
        CHECK_ST(segcache_set(c, S(key), S("v"), 0, 1), SEGCACHE_OK);
    }
    CHECK_ST(segcache_set(c, S("long"), S("v"), 0, 1000), SEGCACHE_OK);
    uint64_t items = 99, segs = 99;
    CHECK_ST(segcache_expire(c, &items, &segs), SEGCACHE_OK);
    CHECK(items == 0 && segs == 0);

    CHECK_ST(segcache_set(f, S("old"), S("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_flush_after(f, 1), SEGCACHE_OK);
    CHECK_ST(segcache_contains(f, S("old")), SEGCACHE_OK);

    sleep_ms(2200);

    CHECK_ST(segcache_expire(c, &items, &segs), SEGCACHE_OK);
    CHECK(items == 10 && segs >= 1);
    CHECK_ST(segcache_expire(c, NULL, NULL), SEGCACHE_OK);
    CHECK_ST(segcache_contains(c, S("short:3")), SEGCACHE_NOT_FOUND);
    expect_value(c, "long", "v");
    segcache_stats_t st;
    CHECK_ST(segcache_stats(c, &st), SEGCACHE_OK);
    CHECK(st.expirations == 10 && st.items == 1);

    CHECK_ST(segcache_contains(f, S("old")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_set(f, S("new"), S("v"), 0, 0), SEGCACHE_OK);
    /* A far-off delayed flush is cancelled by an immediate one. */
    CHECK_ST(segcache_flush_after(f, UINT64_MAX), SEGCACHE_OK);
    CHECK_ST(segcache_contains(f, S("new")), SEGCACHE_OK);
    CHECK_ST(segcache_flush(f), SEGCACHE_OK);
    CHECK_ST(segcache_contains(f, S("new")), SEGCACHE_NOT_FOUND);
    CHECK_ST(segcache_set(f, S("x"), S("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_flush_after(f, 0), SEGCACHE_OK);
    CHECK_ST(segcache_contains(f, S("x")), SEGCACHE_NOT_FOUND);
    segcache_free(c);
    segcache_free(f);
}

/* --- NULL handle, NULL key, empty key, long key: for every function ------- */

static int never_called;
static void count_call(const uint8_t *v, size_t n, uint32_t f, uint64_t cas, void *u) {
    (void)v, (void)n, (void)f, (void)cas, (void)u;
    never_called++;
}

static void count_value_call(const uint8_t *v, size_t n, uint32_t f, void *u) {
    (void)v, (void)n, (void)f, (void)u;
    never_called++;
}

/* Runs every key-taking function with (key, klen) and checks the status. */
static void every_key_function(segcache_t *c, const uint8_t *key, size_t klen,
                               segcache_status_t want, int line) {
    uint8_t buf[8];
    size_t len;
    uint64_t n;
    int64_t t;
    int before = (int)atomic_load(&check_failed);
    CHECK_ST(segcache_set(c, key, klen, S("v"), 0, 0), want);
    CHECK_ST(segcache_add(c, key, klen, S("v"), 0, 0), want);
    CHECK_ST(segcache_replace(c, key, klen, S("v"), 0, 0), want);
    CHECK_ST(segcache_cas(c, key, klen, S("v"), 0, 0, 1), want);
    CHECK_ST(segcache_append(c, key, klen, S("v")), want);
    CHECK_ST(segcache_prepend(c, key, klen, S("v")), want);
    for (segcache_store_mode_t m = SEGCACHE_STORE_SET; m <= SEGCACHE_STORE_PREPEND; m++)
        CHECK_ST(segcache_store(c, m, key, klen, S("v"), 0, 0, NULL, &n), want);
    CHECK_ST(segcache_incr(c, key, klen, 1, &n), want);
    CHECK_ST(segcache_decr(c, key, klen, 1, &n), want);
    CHECK_ST(segcache_touch(c, key, klen, 10), want);
    CHECK_ST(segcache_delete(c, key, klen), want);
    CHECK_ST(segcache_contains(c, key, klen), want);
    CHECK_ST(segcache_get(c, key, klen, buf, sizeof buf, &len, NULL, NULL), want);
    CHECK_ST(segcache_get_with(c, key, klen, count_call, NULL), want);
    CHECK_ST(segcache_get_value_with(c, key, klen, count_value_call, NULL), want);
    CHECK_ST(segcache_ttl(c, key, klen, &t), want);
    if ((int)atomic_load(&check_failed) != before) {
        fprintf(stderr, "  (from the call at line %d)\n", line);
    }
}

static void test_bad_arguments(segcache_t *c) {
    uint8_t long_key[SEGCACHE_MAX_KEY_LEN + 1];
    memset(long_key, 'k', sizeof long_key);

    /* NULL handle: every function. */
    every_key_function(NULL, S("k"), SEGCACHE_INVALID_ARGUMENT, __LINE__);
    uint64_t u;
    size_t z;
    segcache_stats_t st;
    CHECK_ST(segcache_flush(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_flush_after(NULL, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_expire(NULL, &u, &u), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_clear(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_len(NULL, &z), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_max_value_len(NULL, 1, &z), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_stats(NULL, &st), SEGCACHE_INVALID_ARGUMENT);

    /* NULL key with a nonzero length. */
    every_key_function(c, NULL, 5, SEGCACHE_INVALID_ARGUMENT, __LINE__);
    /* Empty key, with and without a pointer. */
    every_key_function(c, NULL, 0, SEGCACHE_EMPTY_KEY, __LINE__);
    every_key_function(c, (const uint8_t *)"k", 0, SEGCACHE_EMPTY_KEY, __LINE__);
    /* Key one byte too long (and absurdly long: never read). */
    every_key_function(c, long_key, sizeof long_key, SEGCACHE_KEY_TOO_LONG, __LINE__);
    every_key_function(c, long_key, SIZE_MAX, SEGCACHE_KEY_TOO_LONG, __LINE__);
    CHECK(never_called == 0);

    /* Nothing above stored anything. */
    CHECK_ST(segcache_len(c, &z), SEGCACHE_OK);
    size_t before = z;
    CHECK_ST(segcache_set(c, S("k"), NULL, 1, 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_add(c, S("k"), NULL, 1, 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_replace(c, S("k"), NULL, 1, 0, 0), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_cas(c, S("k"), NULL, 1, 0, 0, 1), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_len(c, &z), SEGCACHE_OK);
    CHECK(z == before);
}

/* Warm restart: fill a file-backed cache, save it (which frees the handle),
 * build again with restore and find every item; a bad path and a save
 * without a datapool are PERSISTENCE errors. */
static void test_warm_restart(void) {
    char dir[] = "/tmp/segcache-c-test-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char pool[256];
    snprintf(pool, sizeof pool, "%s/pool", dir);
    segcache_config_t cfg = segcache_config_default();
    cfg.heap_size = 8u << 20;
    cfg.segment_size = 256u << 10;
    cfg.shards = 2;
    cfg.datapool = pool;
    cfg.restore = true;

    segcache_status_t err = SEGCACHE_OK;
    segcache_t *c = segcache_new(&cfg, &err);
    CHECK(c != NULL);
    int32_t outcome = -1;
    uint64_t items = 99;
    CHECK_ST(segcache_restore_outcome(c, &outcome, &items), SEGCACHE_OK);
    CHECK(outcome == 2 && items == 0); /* nothing saved yet: fresh */
    char key[32], value[32];
    for (int i = 0; i < 500; i++) {
        int kl = snprintf(key, sizeof key, "key:%d", i);
        int vl = snprintf(value, sizeof value, "value-%d", i * 7);
        CHECK_ST(segcache_set(c, (const uint8_t *)key, (size_t)kl,
                              (const uint8_t *)value, (size_t)vl, (uint32_t)i, 0),
                 SEGCACHE_OK);
    }
    CHECK_ST(segcache_save(c), SEGCACHE_OK); /* c is consumed */

    c = segcache_new(&cfg, &err);
    CHECK(c != NULL);
    CHECK_ST(segcache_restore_outcome(c, &outcome, &items), SEGCACHE_OK);
    CHECK(outcome == 1 && items == 500);
    for (int i = 0; i < 500; i += 37) {
        int kl = snprintf(key, sizeof key, "key:%d", i);
        int vl = snprintf(value, sizeof value, "value-%d", i * 7);
        uint8_t buf[32];
        size_t len = 0;
        uint32_t flags = 0;
        CHECK_ST(segcache_get(c, (const uint8_t *)key, (size_t)kl, buf, sizeof buf,
                              &len, &flags, NULL),
                 SEGCACHE_OK);
        CHECK(len == (size_t)vl && memcmp(buf, value, len) == 0 && flags == (uint32_t)i);
    }
    segcache_free(c); /* no save: the next start is empty */
    c = segcache_new(&cfg, &err);
    CHECK(c != NULL);
    CHECK_ST(segcache_restore_outcome(c, &outcome, NULL), SEGCACHE_OK);
    CHECK(outcome == 2);
    segcache_free(c);

    cfg.datapool = "/nonexistent-dir/x/pool";
    CHECK(segcache_new(&cfg, &err) == NULL);
    CHECK_ST(err, SEGCACHE_PERSISTENCE);
    CHECK(strstr(segcache_last_error(), "/nonexistent-dir/x/pool") != NULL);
    segcache_config_t plain = segcache_config_default();
    plain.restore = true; /* restore without a datapool */
    CHECK(segcache_new(&plain, &err) == NULL);
    CHECK_ST(err, SEGCACHE_INVALID_CONFIG);
    CHECK(names_field("restore"));
    plain.restore = false;
    c = segcache_new(&plain, &err);
    CHECK_ST(segcache_restore_outcome(c, &outcome, NULL), SEGCACHE_OK);
    CHECK(outcome == 0);
    CHECK_ST(segcache_save(c), SEGCACHE_PERSISTENCE); /* consumed anyway */
    CHECK_ST(segcache_save(NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK_ST(segcache_restore_outcome(NULL, &outcome, NULL), SEGCACHE_INVALID_ARGUMENT);
    CHECK(strcmp(segcache_strerror(SEGCACHE_PERSISTENCE), "unknown status") != 0);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Resident bytes of this process (/proc/self/statm), or 0 if unreadable. */
static size_t resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f == NULL)
        return 0;
    int got = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    return got == 2 ? resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

/* prefault = true makes the heap resident in segcache_new; the default
 * leaves it to the first writes. Measured as the growth of this process's
 * resident size across segcache_new, on a 64 MiB heap. */
static void test_prefault(void) {
    const size_t heap = 64u << 20;
    segcache_config_t cfg = segcache_config_default();
    CHECK(cfg.prefault == false);
    cfg.heap_size = heap;
    cfg.shards = 2;
    segcache_status_t err = SEGCACHE_PANIC;
    size_t before = resident_bytes();
    segcache_t *lazy = segcache_new(&cfg, &err);
    size_t lazy_growth = resident_bytes() - before;
    CHECK(lazy != NULL);
    CHECK_ST(err, SEGCACHE_OK);
    CHECK(lazy_growth < heap / 2);
    cfg.prefault = true;
    before = resident_bytes();
    segcache_t *eager = segcache_new(&cfg, &err);
    size_t eager_growth = resident_bytes() - before;
    CHECK(eager != NULL);
    CHECK_ST(err, SEGCACHE_OK);
    CHECK(before > 0 && eager_growth >= heap - heap / 10);
    if (eager_growth < heap - heap / 10 || lazy_growth >= heap / 2)
        fprintf(stderr, "resident growth: lazy %zu, prefault %zu bytes\n", lazy_growth,
                eager_growth);
    /* A prefaulted cache works as any other. */
    CHECK_ST(segcache_set(eager, S("k"), S("v"), 0, 0), SEGCACHE_OK);
    CHECK_ST(segcache_contains(eager, S("k")), SEGCACHE_OK);
    segcache_free(eager);
    segcache_free(lazy);
}

static void ignore_value(const uint8_t *v, size_t n, uint32_t f, void *u) {
    (void)v, (void)n, (void)f, (void)u;
}

static void ignore_token(const uint8_t *v, size_t n, uint32_t f, uint64_t cas, void *u) {
    (void)v, (void)n, (void)f, (void)cas, (void)u;
}

/* Reads with segcache_get_value_with make no CAS token, so a same-size
   overwrite is written over the old item: 512 overwrites of a 1 KiB value
   (twice a segment) take no new segment. After reads through
   segcache_get_with, which hand the token out, the same overwrites are
   appended and fill new segments. */
static void test_tokenless_reads_keep_overwrites_in_place(void) {
    segcache_t *c = make(16u << 20, 256u << 10, 1, NULL);
    uint8_t value[1024];
    memset(value, 'a', sizeof value);
    CHECK_ST(segcache_set(c, S("k"), value, sizeof value, 0, 0), SEGCACHE_OK);
    segcache_stats_t before, after;
    CHECK_ST(segcache_stats(c, &before), SEGCACHE_OK);
    for (int i = 0; i < 512; i++) {
        CHECK_ST(segcache_get_value_with(c, S("k"), ignore_value, NULL), SEGCACHE_OK);
        value[0] = (uint8_t)i;
        CHECK_ST(segcache_set(c, S("k"), value, sizeof value, 0, 0), SEGCACHE_OK);
    }
    CHECK_ST(segcache_stats(c, &after), SEGCACHE_OK);
    CHECK(after.segments_used == before.segments_used);
    for (int i = 0; i < 512; i++) {
        CHECK_ST(segcache_get_with(c, S("k"), ignore_token, NULL), SEGCACHE_OK);
        value[0] = (uint8_t)i;
        CHECK_ST(segcache_set(c, S("k"), value, sizeof value, 0, 0), SEGCACHE_OK);
    }
    CHECK_ST(segcache_stats(c, &after), SEGCACHE_OK);
    CHECK(after.segments_used > before.segments_used);
    uint8_t buf[1024];
    size_t len = 0;
    CHECK_ST(segcache_get(c, S("k"), buf, sizeof buf, &len, NULL, NULL), SEGCACHE_OK);
    CHECK(len == sizeof value && memcmp(buf, value, len) == 0);
    segcache_free(c);
}

int main(void) {
    test_warm_restart();
    test_prefault();
    test_config();
    test_strerror();
    segcache_t *c = make(32u << 20, 256u << 10, 4, NULL);
    test_set_get(c);
    test_conditional_stores(c);
    test_store(c);
    test_arith(c);
    test_ttl_touch_delete(c);
    test_bad_arguments(c);
    segcache_free(c);
    test_sizes_and_stats();
    test_pressure();
    test_expiry_and_flush();
    test_tokenless_reads_keep_overwrites_in_place();
    return check_summary("test_api");
}
