/* ptemu's test program for signals under `ptemu run` (spec/qemu.md QE16; tests/qemu_run.rs).
 * A SIGUSR1 the main thread sends itself (delivered as its tgkill returns), then three sent to a
 * second thread while it computes (delivered between two of its blocks). The handler notes
 * where each signal interrupted the thread (the IP in the signal frame QEMU builds), and
 * argv[1], when given, receives those addresses: the test's independent account of where each
 * interrupt came. stdout is the same natively and under QEMU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <ucontext.h>

static volatile long delivered, stop, spin, computing;
static unsigned long interrupted[16];

static void on_usr1(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    (void)sig;
    (void)si;
    if (delivered < 16)
        interrupted[delivered] = (unsigned long)uc->uc_mcontext.gregs[REG_RIP];
    delivered++;
}

static void *worker(void *arg)
{
    long s = 0;
    computing = 1;
    while (!stop)
        s += spin++ & 7;
    return (void *)s + (long)arg;
}

int main(int argc, char **argv)
{
    struct sigaction sa = {0};
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    raise(SIGUSR1);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    /* The signals come while the worker computes, not while it is still starting in a
     * system call (a signal delivered as a system call returns is traced otherwise). */
    while (!computing)
        sched_yield();
    for (int i = 0; i < 3; i++) {
        long before = delivered;
        pthread_kill(t, SIGUSR1);
        while (delivered == before)
            sched_yield();
    }
    stop = 1;
    pthread_join(t, 0);
    printf("signals delivered: %ld\n", delivered);
    if (argc > 1) {
        FILE *f = fopen(argv[1], "w");
        for (long i = 0; i < delivered && i < 16; i++)
            fprintf(f, "%lx\n", interrupted[i]);
        fclose(f);
    }
    return 0;
}
