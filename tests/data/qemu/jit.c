/* ptemu's test program for code written at run time under `ptemu run` (spec/qemu.md QE17;
 * tests/qemu_run.rs). It writes code into an anonymous executable page, runs it, rewrites it in
 * place twice (different code at the same addresses) and runs each version: the trace must be
 * decoded against the code as it was when it ran. stdout is the same natively and under QEMU. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

typedef int (*fn)(int);

static const unsigned char one[] = {
    0x8d, 0x47, 0x01, /* lea eax, [rdi + 1] */
    0xc3,             /* ret */
};
static const unsigned char two[] = {
    0x8d, 0x04, 0x3f, /* lea eax, [rdi + rdi] */
    0xc3,             /* ret */
};
static const unsigned char three[] = {
    0x89, 0xf8,       /* mov eax, edi */
    0xb9, 5, 0, 0, 0, /* mov ecx, 5 */
    0x01, 0xc0,       /* l: add eax, eax */
    0xff, 0xc9,       /* dec ecx */
    0x75, 0xfa,       /* jnz l */
    0xc3,             /* ret */
};

static long run(fn f, int n)
{
    long sum = 0;
    for (int i = 0; i < n; i++)
        sum += f(i);
    return sum;
}

int main(void)
{
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
    memcpy(page, one, sizeof one);
    long d = run(f, 10);
    printf("%ld %ld %ld %ld\n", a, b, c, d);
    return 0;
}
