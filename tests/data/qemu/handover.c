/* A traced program that hands streams to `ptemu run` itself, as only a process of the run can
 * (spec/qemu.md QE19): it finds the plugin's fork descriptor among its own (the one
 * SOCK_SEQPACKET socket) and hands over two forged streams, one naming process 1 and one
 * naming itself, the second once ptemu has read the first. `ptemu run` must refuse both (a stream is the process that sent it, and only
 * a child a traced process forked is traced) and trace the program as it ran.
 * `handover spam N` sends N datagrams without a descriptor instead; `handover shut` shuts the
 * fork descriptor down.
 * Written for ptemu's tests (MIT OR Apache-2.0). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static int hand_over(int chan, long tid) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = u.space;
    m.msg_controllen = sizeof u.space;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &sv[1], sizeof(int));
    if (sendmsg(chan, &m, 0) != 1) return -1;
    close(sv[1]);
    unsigned char b[32];
    int n = 8;
    memcpy(b, "PTEMUQ\0\3", 8); /* ptemu-wire's MAGIC: the stream's name and version */
    b[n++] = 7; /* whose records follow: thread `tid` */
    while (tid >= 0x80) {
        b[n++] = (unsigned char)(tid | 0x80);
        tid >>= 7;
    }
    b[n++] = (unsigned char)tid;
    if (write(sv[0], b, n) != n) return -1;
    /* Until ptemu has read it all and let go: the next hand-over is not one "still open". */
    shutdown(sv[0], SHUT_WR);
    while (read(sv[0], b, sizeof b) > 0) {
    }
    close(sv[0]);
    return 0;
}

int main(int argc, char **argv) {
    struct rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    int chan = -1;
    for (long fd = (long)r.rlim_cur - 1; fd > 2 && chan < 0; fd--) {
        int type;
        socklen_t len = sizeof type;
        if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET)
            chan = (int)fd;
    }
    if (chan < 0) {
        printf("no fork descriptor\n");
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "spam") == 0) {
        /* Datagrams without a descriptor: each one refused, the list kept short. */
        for (int k = atoi(argv[2]); k > 0; k--) (void)!send(chan, "x", 1, 0);
        printf("spammed\n");
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "shut") == 0) {
        /* Shutting the fork descriptor down is closing it (QE10). */
        shutdown(chan, SHUT_RDWR);
        printf("shut\n");
        return 0;
    }
    int a = hand_over(chan, 1);
    int b = hand_over(chan, getpid());
    printf("handed over: %d %d\n", a, b);
    return 0;
}
