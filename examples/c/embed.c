/*
 * embed.c: the scenario of examples/embed.rs through ptemu's C API.
 *
 * A guest driver programs a ToPA ring with WRMSR (three 4 KiB regions, INT on the last, END to a
 * skid table whose region catches what is written before the PMI is taken, P2), user code runs
 * as events, and each ToPA PMI goes to the guest's handler, which follows the SDM's algorithm
 * (P7): clear TraceEn, consume the regions up to OUTPUT_MASK_PTRS, re-arm, clear the PMI bit
 * through IA32_PERF_GLOBAL_STATUS_RESET, restore IA32_RTIT_CTL. Guest physical memory is the
 * emulator's: ptemu reaches it through read/write callbacks.
 *
 * Usage: embed [TRACE_OUT]  (writes the collected trace to TRACE_OUT when given)
 * It prints the summary lines `cargo run --example embed` prints (all but its decoder and check
 * lines; tests/c_api.rs compares them), the output unit's byte counts among them, and exits
 * non-zero if a call fails, a PMI was not handled or a byte the unit stored was not collected.
 */
#include "ptemu.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE 0x5000ull
#define REGIONS 0x100000ull
#define SKID_TABLE 0x6000ull
#define SKID 0x200000ull
#define LOOP 0x401000ull
#define FUNC 0x402000ull
#define CASES 0x403000ull
#define KERNEL 0xffffffff81000000ull
#define PMI_HANDLER (KERNEL + 0x1000)
#define PMI_VECTOR 0xfe
#define CR3 0x12345000ull
#define ITERATIONS 20000

/* The guest's physical memory: the emulator's own array, 2 MiB + 4 KiB from address 0. */
#define GUEST_SIZE (SKID + 0x1000)
static uint8_t *guest;

static int32_t guest_read(void *ctx, uint64_t pa, uint8_t *buf, size_t len) {
    (void)ctx;
    if (pa > GUEST_SIZE || len > GUEST_SIZE - pa) return -1;
    memcpy(buf, guest + pa, len);
    return 0;
}

static int32_t guest_write(void *ctx, uint64_t pa, const uint8_t *data, size_t len) {
    (void)ctx;
    if (pa > GUEST_SIZE || len > GUEST_SIZE - pa) return -1;
    memcpy(guest + pa, data, len);
    return 0;
}

static void put_u64(uint64_t pa, uint64_t v) {
    for (int i = 0; i < 8; i++) guest[pa + i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(uint64_t pa) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)guest[pa + i] << (8 * i);
    return v;
}

/* Stops with ptemu's message when a call fails. */
static void check(ptemu_status s, const char *what) {
    if (s != PTEMU_OK) {
        const char *rule = ptemu_last_rule();
        fprintf(stderr, "embed: %s failed (status %d%s%s): %s\n", what, (int)s, rule ? ", rule " : "",
                rule ? rule : "", ptemu_last_error());
        exit(1);
    }
}

static ptemu_tracer *t;
static ptemu_memory *mem;

/* Guest kernel code: WRMSR is 0f 30, 2 bytes. */
static void wrmsr(uint32_t msr, uint64_t value, uint64_t ip) {
    check(ptemu_tracer_wrmsr(t, mem, msr, value, ip, 2), "wrmsr");
}

static uint64_t rdmsr(uint32_t msr) {
    uint64_t v;
    check(ptemu_tracer_rdmsr(t, msr, &v), "rdmsr");
    return v;
}

static void feed(const ptemu_event *e) { check(ptemu_tracer_event(t, mem, e), "event"); }

static ptemu_event far(uint32_t kind, uint64_t from, uint64_t to, uint8_t cpl) {
    ptemu_event e = {0};
    e.kind = PTEMU_EV_FAR;
    e.far_kind = kind;
    e.ip = from;
    e.target = to;
    e.cpl = cpl;
    e.mode = PTEMU_MODE_64;
    return e;
}

/* The next IP after event e, from `ip` (as Event::next_ip). */
static uint64_t next_ip(const ptemu_event *e, uint64_t ip) {
    switch (e->kind) {
    case PTEMU_EV_RETIRE: return e->ip + e->len;
    case PTEMU_EV_COND_BRANCH: return (e->flags & PTEMU_EVF_TAKEN) ? e->target : e->ip + e->len;
    case PTEMU_EV_JUMP: case PTEMU_EV_CALL: case PTEMU_EV_INDIRECT_JUMP:
    case PTEMU_EV_INDIRECT_CALL: case PTEMU_EV_RETURN: case PTEMU_EV_FAR: return e->target;
    default: return ip;
    }
}

/* The guest's user code, iteration i: Jcc, CALL, Jcc, RET, indirect JMP, JMP back. */
static size_t guest_iteration(uint64_t i, ptemu_event *v) {
    int skip = i % 3 == 0, even = i % 2 == 0;
    uint64_t c = CASES + 0x40 * (i * 7 % 5);
    size_t n = 0;
    memset(v, 0, 8 * sizeof *v);
    v[n] = (ptemu_event){.kind = PTEMU_EV_COND_BRANCH, .ip = LOOP, .len = 2, .target = LOOP + 0x10,
                         .flags = skip ? PTEMU_EVF_TAKEN : 0};
    n++;
    if (!skip) v[n++] = (ptemu_event){.kind = PTEMU_EV_RETIRE, .ip = LOOP + 2, .len = 14};
    v[n++] = (ptemu_event){.kind = PTEMU_EV_CALL, .ip = LOOP + 0x10, .len = 5, .target = FUNC};
    v[n++] = (ptemu_event){.kind = PTEMU_EV_COND_BRANCH, .ip = FUNC, .len = 2, .target = FUNC + 8,
                           .flags = even ? PTEMU_EVF_TAKEN : 0};
    if (!even) v[n++] = (ptemu_event){.kind = PTEMU_EV_RETIRE, .ip = FUNC + 2, .len = 6};
    v[n++] = (ptemu_event){.kind = PTEMU_EV_RETURN, .ip = FUNC + 8, .target = LOOP + 0x15};
    v[n++] = (ptemu_event){.kind = PTEMU_EV_INDIRECT_JUMP, .ip = LOOP + 0x15, .target = c};
    v[n++] = (ptemu_event){.kind = PTEMU_EV_JUMP, .ip = c, .target = LOOP};
    return n;
}

/* The collected trace. */
static uint8_t *collected;
static size_t collected_len, collected_cap;

static void collect(uint64_t pa, uint64_t len) {
    if (collected_len + len > collected_cap) {
        collected_cap = 2 * (collected_len + len);
        collected = realloc(collected, collected_cap);
        if (!collected) { perror("embed"); exit(1); }
    }
    memcpy(collected + collected_len, guest + pa, len);
    collected_len += len;
}

/* Copies the stream from the ring's start up to where the output MSRs point, following the
 * table as the processor walked it (W3, W4). The MSRs are exact: TraceEn is 0 (EN3, M7). */
static void consume(void) {
    uint64_t base = rdmsr(PTEMU_IA32_RTIT_OUTPUT_BASE);
    uint64_t ptrs = rdmsr(PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS);
    uint64_t index = (ptrs >> 7) & 0x1ffffff, offset = ptrs >> 32;
    if (rdmsr(PTEMU_IA32_RTIT_STATUS) & PTEMU_STATUS_ERROR) {
        fprintf(stderr, "embed: operational error (E3)\n");
        exit(1);
    }
    uint64_t table = TABLE, i = 0;
    for (int step = 0; step < 8; step++) {
        uint64_t e = get_u64(table + 8 * i);
        uint64_t region = e & ~0xfffull & ((1ull << 52) - 1);
        if (e & PTEMU_TOPA_END) {
            table = region;
            i = 0;
            continue;
        }
        int here = table == base && i == index;
        uint64_t size = 0x1000ull << ((e >> PTEMU_TOPA_SIZE_SHIFT) & 0xf);
        collect(region, here ? offset : size);
        if (here) return;
        i++;
    }
    fprintf(stderr, "embed: the output position is not on the ring: the trace wrapped\n");
    exit(1);
}

/* Output from the ring's start, Stopped and Error cleared, the PMI bit cleared (P1). */
static void rearm(uint64_t ip) {
    wrmsr(PTEMU_IA32_RTIT_OUTPUT_BASE, TABLE, ip);
    wrmsr(PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS, 0x7f, ip + 2); /* entry 0, offset 0 */
    uint64_t status = rdmsr(PTEMU_IA32_RTIT_STATUS) & ~(PTEMU_STATUS_STOPPED | PTEMU_STATUS_ERROR);
    wrmsr(PTEMU_IA32_RTIT_STATUS, status, ip + 4);
    wrmsr(PTEMU_IA32_PERF_GLOBAL_STATUS_RESET, PTEMU_GLOBAL_STATUS_TOPA_PMI, ip + 6);
}

/* Output events arrive here as they happen (ptemu_tracer_set_event_fn). */
static void on_output_event(void *ctx, const ptemu_output_event *e) {
    if (e->kind == PTEMU_OUT_PMI) ++*(uint64_t *)ctx;
}

int main(int argc, char **argv) {
    guest = calloc(1, GUEST_SIZE);
    if (!guest) { perror("embed"); return 1; }
    for (uint64_t k = 0; k < 3; k++)
        put_u64(TABLE + 8 * k, (REGIONS + 0x1000 * k) | (k == 2 ? PTEMU_TOPA_INT : 0));
    put_u64(TABLE + 24, SKID_TABLE | PTEMU_TOPA_END);
    put_u64(SKID_TABLE, SKID);
    put_u64(SKID_TABLE + 8, TABLE | PTEMU_TOPA_END);

    check(ptemu_memory_new_callbacks(NULL, guest_read, guest_write, &mem), "ptemu_memory_new_callbacks");
    check(ptemu_tracer_new("icelake", &t), "ptemu_tracer_new");
    uint64_t pmi_events = 0;
    check(ptemu_tracer_set_event_fn(t, on_output_event, &pmi_events), "ptemu_tracer_set_event_fn");

    /* The driver, at CPL 0: the output MSRs, then IA32_RTIT_CTL last (EN1); then SYSRET. */
    check(ptemu_tracer_set_state(t, KERNEL, 0, CR3, PTEMU_MODE_64), "ptemu_tracer_set_state");
    rearm(KERNEL);
    uint64_t ctl = PTEMU_CTL_TRACE_EN | PTEMU_CTL_TOPA | PTEMU_CTL_BRANCH_EN | PTEMU_CTL_USER;
    wrmsr(PTEMU_IA32_RTIT_CTL, ctl, KERNEL + 8);
    uint64_t ip = LOOP;
    ptemu_event e = far(PTEMU_FAR_SYSRET, KERNEL + 10, ip, 3);
    feed(&e);

    uint64_t pmis_handled = 0;
    ptemu_event batch[8];
    for (uint64_t it = 0; it < ITERATIONS; it++) {
        size_t n = guest_iteration(it, batch);
        for (size_t k = 0; k < n; k++) {
            feed(&batch[k]);
            ip = next_ip(&batch[k], ip);
            /* The PMI is taken at the next instruction boundary, after the bytes already written
             * (P2): the emulator polls the status bit the unit sets (P1, P5). */
            if (!(rdmsr(PTEMU_IA32_PERF_GLOBAL_STATUS) & PTEMU_GLOBAL_STATUS_TOPA_PMI)) continue;
            pmis_handled++;
            e = far(PTEMU_FAR_INTERRUPT, ip, PMI_HANDLER, 0);
            e.vector = PMI_VECTOR;
            feed(&e);
            uint64_t saved = rdmsr(PTEMU_IA32_RTIT_CTL);
            wrmsr(PTEMU_IA32_RTIT_CTL, saved & ~PTEMU_CTL_TRACE_EN, PMI_HANDLER);
            consume();
            rearm(PMI_HANDLER + 2);
            wrmsr(PTEMU_IA32_RTIT_CTL, saved, PMI_HANDLER + 10);
            e = far(PTEMU_FAR_IRET, PMI_HANDLER + 12, ip, 3);
            feed(&e);
        }
    }

    /* The guest ends the session: SYSCALL into the driver, which disables and collects the tail. */
    e = far(PTEMU_FAR_SYSCALL, ip, KERNEL, 0);
    feed(&e);
    wrmsr(PTEMU_IA32_RTIT_CTL, ctl & ~PTEMU_CTL_TRACE_EN, KERNEL);
    consume();

    ptemu_stats s;
    check(ptemu_tracer_stats(t, &s), "ptemu_tracer_stats");
    printf("events fed:      %" PRIu64 "\n", s.events);
    printf("PMIs handled:    %" PRIu64 " (the unit raised %" PRIu64 ")\n", pmis_handled, pmi_events);
    printf("bytes collected: %zu (the tracer produced %" PRIu64 ")\n", collected_len, s.bytes);
    /* The output unit's byte counts: the ring is consumed and re-armed at each PMI, so output
     * comes back over bytes it wrote (overwrites, laps). */
    ptemu_output_stats o;
    check(ptemu_tracer_unit_stats(t, &o), "ptemu_tracer_unit_stats");
    printf("output unit:     %" PRIu64 " bytes in, %" PRIu64 " written, %" PRIu64 " lost, %" PRIu64
           " overwritten, %" PRIu64 " laps\n",
           o.bytes_in, o.bytes_written, o.bytes_lost, o.bytes_overwritten, o.laps);
    static const struct { const char *name; uint32_t msr; } msrs[] = {
        {"IA32_RTIT_CTL", PTEMU_IA32_RTIT_CTL},
        {"IA32_RTIT_STATUS", PTEMU_IA32_RTIT_STATUS},
        {"IA32_RTIT_OUTPUT_BASE", PTEMU_IA32_RTIT_OUTPUT_BASE},
        {"IA32_RTIT_OUTPUT_MASK_PTRS", PTEMU_IA32_RTIT_OUTPUT_MASK_PTRS},
        {"IA32_PERF_GLOBAL_STATUS", PTEMU_IA32_PERF_GLOBAL_STATUS},
    };
    for (size_t k = 0; k < sizeof msrs / sizeof msrs[0]; k++)
        printf("%-27s = 0x%016" PRIx64 "\n", msrs[k].name, rdmsr(msrs[k].msr));

    if (argc > 1) {
        FILE *f = fopen(argv[1], "wb");
        if (!f || fwrite(collected, 1, collected_len, f) != collected_len || fclose(f) != 0) {
            perror(argv[1]);
            return 1;
        }
    }
    ptemu_tracer_free(t);
    ptemu_memory_free(mem);
    free(collected);
    free(guest);
    int ok = collected_len == s.bytes_written && pmis_handled == pmi_events && pmis_handled > 0 &&
             o.bytes_in == o.bytes_written + o.bytes_lost;
    return ok ? 0 : 1;
}
