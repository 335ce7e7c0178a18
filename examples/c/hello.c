/* Store a value, read it back, print it. Build: make (see Makefile). */
#include <stdio.h>
#include <string.h>
#include <segcache.h>

int main(void) {
    segcache_config_t cfg = segcache_config_default();
    cfg.heap_size = 16 << 20;
    segcache_status_t st;
    segcache_t *cache = segcache_new(&cfg, &st);
    if (cache == NULL) {
        fprintf(stderr, "segcache_new: %s\n", segcache_strerror(st));
        return 1;
    }
    const char *key = "greeting", *value = "hello, world";
    st = segcache_set(cache, (const uint8_t *)key, strlen(key),
                      (const uint8_t *)value, strlen(value), 0, 60);
    char buf[64];
    size_t len = 0;
    if (st == SEGCACHE_OK)
        st = segcache_get(cache, (const uint8_t *)key, strlen(key),
                          (uint8_t *)buf, sizeof buf, &len, NULL, NULL);
    if (st == SEGCACHE_OK)
        printf("%s = %.*s\n", key, (int)len, buf);
    else
        fprintf(stderr, "segcache: %s\n", segcache_strerror(st));
    segcache_free(cache);
    return st == SEGCACHE_OK ? 0 : 1;
}
