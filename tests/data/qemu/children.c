/* Forked children for the limits of `ptemu run` (spec/qemu.md QE19) and a full disk:
 *   children N MS LOOPS: forks N children, each running LOOPS iterations of a loop and then
 *   sleeping MS milliseconds, and waits for them;
 *   orphan MS: forks one child that sleeps MS milliseconds, and exits at once (status 0);
 *   serial N: forks N children one after another, each exiting at once, waiting for each;
 *   killmid: forks a child that forks a grandchild (which computes and exits), waits for it and
 *   then computes until its parent kills it (SIGKILL, outside a system call); exits 3.
 * Written for ptemu's tests (MIT OR Apache-2.0). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static void nap(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, 0);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "orphan") == 0) {
        if (fork() == 0) {
            nap(atol(argv[2]));
            return 0;
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "serial") == 0) {
        int n = atoi(argv[2]);
        for (int k = 0; k < n; k++) {
            pid_t p = fork();
            if (p == 0) _exit(0);
            waitpid(p, 0, 0);
        }
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "killmid") == 0) {
        int pipefd[2];
        if (pipe(pipefd) != 0) return 2;
        pid_t c = fork();
        if (c == 0) {
            pid_t g = fork();
            if (g == 0) {
                for (long i = 0; i < 100000; i++) sink += i;
                _exit(0);
            }
            waitpid(g, 0, 0);
            (void)!write(pipefd[1], "g", 1);
            for (;;) sink += sink >> 1 ^ 7;
        }
        char b;
        (void)!read(pipefd[0], &b, 1);
        nap(200);
        kill(c, SIGKILL);
        waitpid(c, 0, 0);
        return 3;
    }
    if (argc != 5 || strcmp(argv[1], "children") != 0) return 2;
    int n = atoi(argv[2]);
    long ms = atol(argv[3]);
    long loops = atol(argv[4]);
    for (int k = 0; k < n; k++) {
        if (fork() == 0) {
            for (long i = 0; i < loops; i++) sink += i ^ (sink >> 3);
            nap(ms);
            return 0;
        }
    }
    int status, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed ? 1 : 3;
}
