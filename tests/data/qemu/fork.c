/* ptemu's test program for forked children under `ptemu run` (spec/qemu.md QE8, QE18;
 * tests/qemu_run.rs): the program forks a child that computes and forks a grandchild; the
 * grandchild computes and execs /usr/bin/echo. Each waits for its child. stdout is the same
 * natively and under QEMU. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static long work(long n)
{
    long s = 0;
    for (long i = 0; i < n; i++)
        s += i * (i & 7);
    return s;
}

int main(void)
{
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        long r = work(20000);
        pid_t grandchild = fork();
        if (grandchild == 0) {
            printf("grandchild %ld\n", work(3000));
            fflush(stdout);
            execl("/usr/bin/echo", "echo", "replaced", (char *)0);
            _exit(9);
        }
        int st;
        waitpid(grandchild, &st, 0);
        printf("child %ld, grandchild exited %d\n", r, WEXITSTATUS(st));
        return 3;
    }
    int st;
    waitpid(child, &st, 0);
    printf("parent %ld, child exited %d\n", work(1000), WEXITSTATUS(st));
    return 0;
}
