/* ptemu's fault program for `ptemu run` (issue 51 §4; spec/qemu.md QE21; tests/qemu_run.rs):
 * faults whose handlers the program installed. The main thread loads through a NULL pointer in
 * a loop (SIGSEGV, an SA_SIGINFO handler that jumps out with siglongjmp), divides by zero at
 * `fault_div` (SIGFPE, a handler without SA_SIGINFO), loads from a page it cannot read (the
 * SIGSEGV handler makes it readable and returns: the load runs again), starts a worker that
 * loads through the NULL pointer too, and at last runs `ud2` at `fault_ud2` (SIGILL, whose
 * handler exits). The SIGSEGV handler saves where each fault stopped its thread (the IP in
 * the signal frame); argv[1], when given, receives those addresses. The handlers do no stdio:
 * QEMU 7.2 enters a handler with its stack 16-byte aligned, 8 off what the ABI says, so code
 * that keeps SSE values on the stack (printf) would fault there. stdout is the same natively
 * and under QEMU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

static __thread sigjmp_buf env;
static volatile unsigned long faulted_at[16];
static volatile int faults;
static volatile int *guarded;
static volatile int *cells[8];
static int values[8] = {1, 2, 3, 4, 5, 6, 7, 8};

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    if (faults < 16)
        faulted_at[faults] = (unsigned long)uc->uc_mcontext.gregs[REG_RIP];
    faults++;
    if (guarded && si->si_addr == (void *)guarded) {
        mprotect((void *)guarded, 4096, PROT_READ | PROT_WRITE);
        return;
    }
    siglongjmp(env, sig);
}

static void on_fpe(int sig)
{
    siglongjmp(env, sig);
}

static void on_ill(int sig)
{
    (void)sig;
    _exit(0);
}

__attribute__((noinline)) static int sum_cells(void)
{
    int s = 0;
    for (int i = 0; i < 8; i++)
        s += *cells[i];
    return s;
}

__attribute__((noinline)) static int divide(int a, int b)
{
    int q;
    __asm__ volatile("cltd\n\t.globl fault_div\nfault_div:\n\tidivl %2"
                     : "=a"(q)
                     : "0"(a), "r"(b)
                     : "edx", "cc");
    return q;
}

static void *worker(void *arg)
{
    (void)arg;
    if (sigsetjmp(env, 1) == 0)
        return (void *)(long)sum_cells();
    return (void *)-1L;
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, 0);
    signal(SIGFPE, on_fpe);
    signal(SIGILL, on_ill);
    for (int i = 0; i < 8; i++)
        cells[i] = &values[i];
    cells[5] = 0;
    volatile int zero = 0;
    int sum = -1, quotient = -1;
    if (sigsetjmp(env, 1) == 0)
        sum = sum_cells();
    if (sigsetjmp(env, 1) == 0)
        quotient = divide(7, zero);
    guarded = mmap(0, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int read = guarded[0] + 1;
    pthread_t t;
    void *from_worker;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, &from_worker);
    printf("sum %d, quotient %d, guarded %d, worker %ld; SIGSEGV faults %d\n", sum, quotient, read,
           (long)from_worker, faults);
    fflush(stdout);
    if (argc > 1) {
        FILE *f = fopen(argv[1], "w");
        for (int i = 0; i < faults && i < 16; i++)
            fprintf(f, "%lx\n", faulted_at[i]);
        fclose(f);
    }
    __asm__ volatile(".globl fault_ud2\nfault_ud2:\n\tud2");
    return 1;
}
