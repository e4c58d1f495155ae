/* Forked children for the limits of `ptemu run` (spec/qemu.md QE19) and a full disk:
 *   children N MS LOOPS: forks N children, each running LOOPS iterations of a loop and then
 *   sleeping MS milliseconds, and waits for them;
 *   orphan MS: forks one child that sleeps MS milliseconds, and exits at once (status 0).
 * Written for ptemu's tests (MIT OR Apache-2.0). */
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
