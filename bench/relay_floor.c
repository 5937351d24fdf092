/* The latency floor of the router's shape in C, so the floor of bench/relay_floor.py can be told
 * apart from Python's own cost: sender -> TCP -> [relay] -> TCP -> receiver, each process asleep
 * in epoll between paced 64-byte messages.
 *
 *   relay_floor direct COUNT RATE   sender straight to the receiver
 *   relay_floor one    COUNT RATE   one process relays between the two connections
 *   relay_floor two    COUNT RATE   ingress process -> shared memory + eventfd -> egress process
 *
 * Prints "p50 <us> p99 <us> received <n>". Every wait has a 2 s timeout and every loop is bounded
 * by COUNT, so a broken run ends. Built and run by bench/relay_floor.py. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MESSAGE 64
#define SLOTS 64
#define WAIT_MS 2000

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int listener(int *port) {
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    if (bind(sock, (void *)&address, sizeof address) || listen(sock, 1)) { perror("listen"); exit(1); }
    getsockname(sock, (void *)&address, &length);
    *port = ntohs(address.sin_port);
    return sock;
}

static int connect_to(int port) {
    int sock = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                  .sin_port = htons(port)};
    if (connect(sock, (void *)&address, sizeof address)) { perror("connect"); exit(1); }
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return sock;
}

static int poller_for(int fd) {
    int poller = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(poller, EPOLL_CTL_ADD, fd, &event);
    return poller;
}

static int wait_readable(int poller) {
    struct epoll_event event;
    return epoll_wait(poller, &event, 1, WAIT_MS) > 0;
}

static int read_message(int fd, char *buffer) {
    int got = 0;
    while (got < MESSAGE) {
        ssize_t n = read(fd, buffer + got, MESSAGE - got);
        if (n <= 0) return 0;
        got += n;
    }
    return 1;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void relay_one(int front, int out_port, int count) {
    int in = accept(front, 0, 0), out = connect_to(out_port), poller = poller_for(in);
    char buffer[MESSAGE];
    for (int i = 0; i < count && wait_readable(poller) && read_message(in, buffer); i++)
        if (write(out, buffer, MESSAGE) != MESSAGE) break;
}

static void ingress(int front, volatile int64_t *ring, int wakeup, int count) {
    int in = accept(front, 0, 0), poller = poller_for(in);
    char buffer[MESSAGE];
    uint64_t one = 1;
    for (int i = 0; i < count && wait_readable(poller) && read_message(in, buffer); i++) {
        memcpy((void *)&ring[8 + (i % SLOTS) * 8], buffer, MESSAGE);
        __atomic_store_n(&ring[0], (int64_t)i + 1, __ATOMIC_RELEASE);
        if (write(wakeup, &one, sizeof one) != sizeof one) break;
    }
}

static void egress(int out_port, volatile int64_t *ring, int wakeup, int count) {
    int out = connect_to(out_port), poller = poller_for(wakeup);
    char buffer[MESSAGE];
    uint64_t value;
    int64_t sent = 0;
    while (sent < count && wait_readable(poller)) {
        if (read(wakeup, &value, sizeof value) != sizeof value) break;
        int64_t published = __atomic_load_n(&ring[0], __ATOMIC_ACQUIRE);
        for (; sent < published; sent++) {
            memcpy(buffer, (void *)&ring[8 + (sent % SLOTS) * 8], MESSAGE);
            if (write(out, buffer, MESSAGE) != MESSAGE) return;
        }
    }
}

static void send_paced(int port, int count, int rate) {
    int out = connect_to(port);
    char buffer[MESSAGE] = {0};
    int64_t start = now_ns(), gap = 1000000000LL / rate;
    for (int i = 0; i < count; i++) {
        int64_t due = start + i * gap;
        while (now_ns() < due) {
            struct timespec nap = {0, 20000};
            nanosleep(&nap, 0);
        }
        int64_t stamp = now_ns();
        memcpy(buffer, &stamp, sizeof stamp);
        if (write(out, buffer, MESSAGE) != MESSAGE) break;
    }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s direct|one|two COUNT RATE\n", argv[0]); return 2; }
    const char *shape = argv[1];
    int count = atoi(argv[2]), rate = atoi(argv[3]), receiver_port, front_port;
    int receiver_listener = listener(&receiver_port), entry = receiver_port, front = -1;
    pid_t children[3];
    int forked = 0;
    if (strcmp(shape, "direct")) {
        front = listener(&front_port);
        entry = front_port;
    }
    if (!strcmp(shape, "one") && (children[forked++] = fork()) == 0) { relay_one(front, receiver_port, count); _exit(0); }
    if (!strcmp(shape, "two")) {
        volatile int64_t *ring = mmap(0, 8 * 8 + SLOTS * MESSAGE, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        int wakeup = eventfd(0, 0);
        if ((children[forked++] = fork()) == 0) { egress(receiver_port, ring, wakeup, count); _exit(0); }
        if ((children[forked++] = fork()) == 0) { ingress(front, ring, wakeup, count); _exit(0); }
    }
    if ((children[forked++] = fork()) == 0) { send_paced(entry, count, rate); _exit(0); }

    int in = accept(receiver_listener, 0, 0), poller = poller_for(in), received = 0;
    double *latencies = malloc(sizeof(double) * count);
    char buffer[MESSAGE];
    while (received < count && wait_readable(poller) && read_message(in, buffer)) {
        int64_t stamp;
        memcpy(&stamp, buffer, sizeof stamp);
        latencies[received++] = (now_ns() - stamp) / 1000.0;
    }
    qsort(latencies, received, sizeof *latencies, by_value);
    printf("p50 %.1f p99 %.1f received %d\n", received ? latencies[received / 2] : -1.0,
           received ? latencies[(int)(received * 0.99)] : -1.0, received);
    for (int i = 0; i < forked; i++) {
        kill(children[i], 9);
        waitpid(children[i], 0, 0);
    }
    return received == count ? 0 : 1;
}
