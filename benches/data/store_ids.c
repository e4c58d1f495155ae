/* The yardstick of spec/qemu.md "Cost" (issue 51 §3): a QEMU 7.2 TCG plugin whose block callback
 * only stores the block's id (a u32: its order of translation) in a per-vCPU buffer, written to
 * /dev/null when full. The least a plugin that records which blocks ran can do; `benches/qemu_run.rs`
 * builds it with gcc and runs gzip under it beside ptemu's plugin.
 *
 * The plugin API's few functions are declared here from their documented signatures (version 1,
 * QEMU 4.2 to 8.x); QEMU's executable exports them, so the library resolves them when it loads. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct {
    const char *target_name;
    struct { int min, cur; } version;
    bool system_emulation;
} qemu_info_t;

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
                                          void (*cb)(unsigned int vcpu, void *data),
                                          int flags, void *data);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *),
                                    void *data);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define IDS 16384 /* 64 KiB of ids a buffer */
#define VCPUS 1024

struct buf { uint32_t len; uint32_t ids[IDS]; };
static struct buf *bufs[VCPUS];
static uint32_t next_id;
static int out = -1;

static void flush(struct buf *b)
{
    if (write(out, b->ids, b->len * sizeof b->ids[0]) < 0) {
        /* /dev/null takes everything */
    }
    b->len = 0;
}

static void on_exec(unsigned int vcpu, void *data)
{
    struct buf *b = bufs[vcpu];
    if (__builtin_expect(b == NULL, 0)) {
        b = bufs[vcpu] = calloc(1, sizeof *b);
    }
    b->ids[b->len++] = (uint32_t)(uintptr_t)data;
    if (__builtin_expect(b->len == IDS, 0)) {
        flush(b);
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    /* QEMU translates under its own lock in user mode. */
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, 0, (void *)(uintptr_t)next_id++);
}

static void on_exit_cb(qemu_plugin_id_t id, void *data)
{
    (void)id;
    (void)data;
    for (int k = 0; k < VCPUS; k++) {
        if (bufs[k]) {
            flush(bufs[k]);
        }
    }
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id,
                                                               const qemu_info_t *info, int argc,
                                                               char **argv)
{
    (void)info;
    (void)argc;
    (void)argv;
    out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (out < 0) {
        return 1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
