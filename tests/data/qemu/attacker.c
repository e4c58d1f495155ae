/* A local user who is not the one running `ptemu run` (spec/qemu.md QE19), as
 * tests/qemu_channel.rs runs it: for DURATION_MS milliseconds it looks, every 10 ms, for a way
 * into the run and uses every one it finds:
 *  - every Unix socket /proc/net/unix lists whose name holds "ptemu" (abstract or not): it
 *    connects three times, holds one connection open (the hang, the lost descriptors), streams
 *    zeros into one (the disk) and sends a forged plugin stream on the third (an injected
 *    child), naming a process of VICTIM_PID's tree (the replacement);
 *  - every descriptor of the victim's processes (/proc/PID/fd/N): it tries to open it.
 * It prints what it reached: "sockets N connections N descriptors N", and exits 0.
 * Written for ptemu's tests (MIT OR Apache-2.0). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static char seen[256][108];
static int nseen;

/* A forged stream: the plugin's magic, a thread record of `pid`, and a note. */
static void forge(int fd, long pid) {
    unsigned char b[64];
    int n = 0;
    memcpy(b, "PTEMUQ\0\3", 8); /* ptemu-wire's MAGIC: the stream's name and version */
    n = 8;
    b[n++] = 7; /* thread record */
    while (pid >= 0x80) {
        b[n++] = (unsigned char)(pid | 0x80);
        pid >>= 7;
    }
    b[n++] = (unsigned char)pid;
    (void)!write(fd, b, n);
}

static int attack_socket(const char *name, int abstract, long victim) {
    int got = 0;
    for (int k = 0; k < 3; k++) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        size_t len = strlen(name);
        if (len > sizeof a.sun_path - 2) return got;
        memcpy(a.sun_path + (abstract ? 1 : 0), name, len);
        socklen_t alen = offsetof(struct sockaddr_un, sun_path) + len + (abstract ? 1 : 0);
        if (connect(fd, (struct sockaddr *)&a, alen) != 0) {
            close(fd);
            continue;
        }
        got++;
        if (k == 1) {
            static char zeros[1 << 16];
            for (int i = 0; i < 300 * 16; i++)
                if (write(fd, zeros, sizeof zeros) < 0) break;
        } else if (k == 2) {
            forge(fd, victim);
        }
        /* k == 0 (and the others): held open until the attacker exits. */
    }
    return got;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    long duration = atol(argv[1]);
    long victim = atol(argv[2]);
    long end = now_ms() + duration;
    int sockets = 0, connections = 0, descriptors = 0;
    while (now_ms() < end) {
        FILE *f = fopen("/proc/net/unix", "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            char *path = strrchr(line, ' ');
            if (!path || !strstr(path, "ptemu")) continue;
            path++;
            path[strcspn(path, "\n")] = 0;
            int abstract = path[0] == '@';
            const char *name = abstract ? path + 1 : path;
            int known = 0;
            for (int i = 0; i < nseen; i++) known |= strcmp(seen[i], name) == 0;
            if (known || nseen == 256) continue;
            snprintf(seen[nseen++], sizeof seen[0], "%s", name);
            sockets++;
            connections += attack_socket(name, abstract, victim);
        }
        if (f) fclose(f);
        DIR *procs = opendir("/proc");
        struct dirent *p;
        while (procs && (p = readdir(procs))) {
            char comm[64], buf[64] = {0};
            snprintf(comm, sizeof comm, "/proc/%s/comm", p->d_name);
            int c = open(comm, O_RDONLY);
            if (c < 0) continue;
            (void)!read(c, buf, sizeof buf - 1);
            close(c);
            if (!strstr(buf, "ptemu") && !strstr(buf, "qemu")) continue;
            char fds[64];
            snprintf(fds, sizeof fds, "/proc/%s/fd", p->d_name);
            DIR *d = opendir(fds);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                char fdp[320];
                if (e->d_name[0] == '.') continue;
                snprintf(fdp, sizeof fdp, "%s/%s", fds, e->d_name);
                int fd = open(fdp, O_RDWR | O_NONBLOCK);
                if (fd >= 0) {
                    descriptors++;
                    close(fd);
                }
            }
            if (d) closedir(d);
        }
        if (procs) closedir(procs);
        usleep(10000);
    }
    printf("sockets %d connections %d descriptors %d\n", sockets, connections, descriptors);
    fflush(stdout);
    return 0;
}
