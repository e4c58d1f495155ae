/* ptemu's crash program for `ptemu run` (issue 51 §4; spec/qemu.md QE22; tests/qemu_run.rs):
 * each way argv[1] names, the program dies of a fault it has no handler for, at a label
 * `crash_*` (global, for nm) in the middle, at the start or at the end of one of QEMU's blocks:
 *   store   a NULL store between two plain instructions (SIGSEGV, #PF)
 *   first   a NULL store that is the first instruction of the block a jump starts (SIGSEGV)
 *   last    an indirect CALL through a NULL pointer, its block's last instruction (SIGSEGV)
 *   fetch   a CALL to address 0: the block runs to its end, fetching at 0 faults (SIGSEGV)
 *   div     a division by zero (SIGFPE, #DE)
 *   ud2     ud2 (SIGILL, #UD)
 *   int3    int3, its block's last instruction (SIGTRAP: a trap, the INT3 retires first)
 *   thread  a second thread stores through NULL while the main thread computes
 *   fork    a forked child stores through NULL; the parent prints how it ended and exits 0
 *   sent    a second thread sends the main thread SIGSEGV (pthread_kill: no fault, si_code
 *           SI_TKILL) while the main thread computes
 *   stop    not a crash: the program stops itself (SIGTSTP; QEMU stops with SIGSTOP) and a forked
 *           child continues it (SIGCONT every 20 ms until the parent says, through a pipe, that
 *           it runs); the parent prints "continued" and exits 0
 * It prints "ran" first (flushed), and nothing after the fault. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long zero;
static volatile int go;
/* What the sent mode's loop computes, kept so that gcc keeps the loop. */
static volatile long sink;

static void crash_store_block(void)
{
    long *p = (long *)zero;
    __asm__ volatile("mov $1, %%ecx\n\t"
                     ".globl crash_store\ncrash_store:\n\t"
                     "movl $7, (%0)\n\t"
                     "add $2, %%ecx\n\t" ::"r"(p)
                     : "rcx", "memory");
}

static void crash_first_block(void)
{
    long *p = (long *)zero;
    __asm__ volatile("jmp 1f\n"
                     "1:\n\t"
                     ".globl crash_first\ncrash_first:\n\t"
                     "movl $7, (%0)\n\t"
                     "nop\n\t" ::"r"(p)
                     : "memory");
}

static void crash_last_block(void)
{
    long *p = (long *)zero;
    __asm__ volatile("mov $1, %%ecx\n\t"
                     ".globl crash_last\ncrash_last:\n\t"
                     "call *(%0)\n\t" ::"r"(p)
                     : "rcx", "memory");
}

static void crash_div_block(void)
{
    long d = zero;
    __asm__ volatile("mov $10, %%eax\n\t"
                     "cqo\n\t"
                     ".globl crash_div\ncrash_div:\n\t"
                     "idivq %0\n\t" ::"r"(d)
                     : "rax", "rdx");
}

static void crash_ud2_block(void)
{
    __asm__ volatile("nop\n\t"
                     ".globl crash_ud2\ncrash_ud2:\n\t"
                     "ud2\n\t");
}

static void crash_int3_block(void)
{
    __asm__ volatile("nop\n\t"
                     ".globl crash_int3\ncrash_int3:\n\t"
                     "int3\n\t"
                     "nop\n\t");
}

static void crash_fetch_block(void)
{
    void (*f)(void) = (void (*)(void))zero;
    f();
}

static long work(long n)
{
    long s = 0;
    for (long i = 0; i < n; i++)
        s += i * (i & 7);
    return s;
}

static volatile int ready;

static void *faulting_thread(void *a)
{
    /* Until the main thread is back from pthread_create (QEMU holds it in the clone system
     * call until this thread has started), so that it is computing, not in a system call,
     * when this thread dies. */
    while (!ready)
        ;
    go = 1;
    work(2000);
    crash_store_block();
    return a;
}

static pthread_t main_thread;

static void *sending_thread(void *a)
{
    work(2000);
    pthread_kill(main_thread, SIGSEGV);
    return a;
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "store";
    printf("ran\n");
    fflush(stdout);
    work(1000);
    if (!strcmp(how, "store"))
        crash_store_block();
    else if (!strcmp(how, "first"))
        crash_first_block();
    else if (!strcmp(how, "last"))
        crash_last_block();
    else if (!strcmp(how, "fetch"))
        crash_fetch_block();
    else if (!strcmp(how, "div"))
        crash_div_block();
    else if (!strcmp(how, "ud2"))
        crash_ud2_block();
    else if (!strcmp(how, "int3"))
        crash_int3_block();
    else if (!strcmp(how, "thread")) {
        pthread_t t;
        pthread_create(&t, 0, faulting_thread, 0);
        ready = 1;
        while (!go)
            ;
        for (;;)
            work(1000);
    } else if (!strcmp(how, "fork")) {
        int status;
        pid_t child = fork();
        if (child == 0) {
            work(500);
            crash_store_block();
            _exit(0);
        }
        waitpid(child, &status, 0);
        printf("child %s %d\n", WIFSIGNALED(status) ? "killed by" : "exited", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 0;
    } else if (!strcmp(how, "sent")) {
        pthread_t t;
        main_thread = pthread_self();
        pthread_create(&t, 0, sending_thread, 0);
        for (;;)
            sink += work(1000);
    } else if (!strcmp(how, "stop")) {
        int p[2];
        pid_t parent = getpid();
        if (pipe(p) != 0)
            return 2;
        pid_t child = fork();
        if (child == 0) {
            char c;
            fcntl(p[0], F_SETFL, O_NONBLOCK);
            while (read(p[0], &c, 1) != 1) {
                usleep(20000);
                kill(parent, SIGCONT);
            }
            _exit(0);
        }
        raise(SIGTSTP);
        if (write(p[1], "c", 1) != 1)
            return 3;
        waitpid(child, 0, 0);
        printf("continued\n");
        return 0;
    }
    return 1;
}
