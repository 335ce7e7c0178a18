/* An LD_PRELOAD library for the benchmark scripts (PELIKAN_NODELAY=1):
 * sets TCP_NODELAY on every socket the process accepts, so that a server
 * which leaves Nagle's algorithm on (Pelikan's) can be measured sending
 * its replies as segcache-server and memcached do. Only wraps accept and
 * accept4; everything else is the C library's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static int nodelay(int fd) {
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

int accept4(int sock, struct sockaddr *addr, socklen_t *len, int flags) {
    static int (*real)(int, struct sockaddr *, socklen_t *, int);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    return nodelay(real(sock, addr, len, flags));
}

int accept(int sock, struct sockaddr *addr, socklen_t *len) {
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *))dlsym(RTLD_NEXT, "accept");
    return nodelay(real(sock, addr, len));
}
