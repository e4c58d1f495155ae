/* ptemu's proof program for `ptemu run` (issue 41; spec/qemu.md QE15-QE17; tests/qemu_run.rs):
 * two threads, a signal handler, and code written and rewritten at run time in an executable
 * mapping. The main thread sends itself a SIGUSR1, starts a worker, writes code into an
 * anonymous page and runs it, rewrites it in place twice and runs each version, then sends the
 * worker three SIGUSR1 while it computes. The handler saves where each signal interrupted its
 * thread (the IP in the signal frame); argv[1], when given, receives those addresses. stdout is
 * the same natively and under QEMU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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

typedef int (*fn)(int);
static const unsigned char one[] = {0x8d, 0x47, 0x01, 0xc3};   /* lea eax, [rdi+1]; ret */
static const unsigned char two[] = {0x8d, 0x04, 0x3f, 0xc3};   /* lea eax, [rdi+rdi]; ret */
static const unsigned char three[] = {
    0x89, 0xf8, 0xb9, 5, 0, 0, 0, /* mov eax, edi; mov ecx, 5 */
    0x01, 0xc0, 0xff, 0xc9,       /* l: add eax, eax; dec ecx */
    0x75, 0xfa, 0xc3,             /* jnz l; ret */
};

static long run(fn f, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += f(i);
    return sum;
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

    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    fn f = (fn)(void *)page;
    memcpy(page, one, sizeof one);
    long a = run(f, 100);
    memcpy(page, two, sizeof two);
    long b = run(f, 100);
    memcpy(page, three, sizeof three);
    long c = run(f, 100);

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
    printf("code: %ld %ld %ld; signals delivered: %ld\n", a, b, c, delivered);
    if (argc > 1) {
        FILE *out = fopen(argv[1], "w");
        for (long i = 0; i < delivered && i < 16; i++)
            fprintf(out, "%lx\n", interrupted[i]);
        fclose(out);
    }
    return 0;
}
