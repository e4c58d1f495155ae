/* A QEMU 10 system-mode plugin of the tests (issue 52, QE26): counts the instructions every
 * vCPU reaches, by an inline add before each instruction (QEMU's own per-vCPU scoreboard), and
 * writes the sum at exit to the file its argument names (out=PATH) as "count_insns: N". An instruction that faults is counted (its add
 * runs before it), as is each iteration of a REP string instruction (QEMU runs one a block).
 * It also counts, the same way, the MOVs to CR3 and the SYSCALLs reached (told by their bytes:
 * 0F 22 /r with CR3 as the register, 0F 05; each after any prefixes), written as
 * "count_mov_cr3: N" and "count_syscall: N".
 * Declarations written from the plugin API's documented signatures (version 2). */
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_plugin_scoreboard;
typedef struct {
    struct qemu_plugin_scoreboard *score;
    size_t offset;
} qemu_plugin_u64;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 = 0 };

__attribute__((visibility("default"))) int qemu_plugin_version = 2;

extern struct qemu_plugin_scoreboard *qemu_plugin_scoreboard_new(size_t element_size);
extern uint64_t qemu_plugin_u64_sum(qemu_plugin_u64 entry);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
extern void qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(struct qemu_plugin_insn *insn,
                                                                enum qemu_plugin_op op,
                                                                qemu_plugin_u64 entry, uint64_t imm);
extern size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *insn, void *dest, size_t len);
extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                                  void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
extern void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *),
                                           void *userdata);

static qemu_plugin_u64 count, mov_cr3, syscalls;

/* The bytes after the legacy and REX prefixes of the instruction in `b` (`n` bytes). */
static const uint8_t *opcode(const uint8_t *b, size_t n, size_t *rest)
{
    size_t k = 0;
    while (k < n && (b[k] == 0x66 || b[k] == 0x67 || b[k] == 0xf0 || b[k] == 0xf2 || b[k] == 0xf3 ||
                     b[k] == 0x2e || b[k] == 0x36 || b[k] == 0x3e || b[k] == 0x26 || b[k] == 0x64 ||
                     b[k] == 0x65 || (b[k] & 0xf0) == 0x40)) {
        k++;
    }
    *rest = n - k;
    return b + k;
}
static const char *out_path;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t k = 0; k < n; k++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, k);
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64, count, 1);
        uint8_t bytes[16];
        size_t n = qemu_plugin_insn_data(insn, bytes, sizeof bytes), left;
        const uint8_t *op = opcode(bytes, n, &left);
        if (left >= 3 && op[0] == 0x0f && op[1] == 0x22 && ((op[2] >> 3) & 7) == 3) {
            qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64, mov_cr3, 1);
        }
        if (left >= 2 && op[0] == 0x0f && op[1] == 0x05) {
            qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64, syscalls, 1);
        }
    }
}

static void on_exit(qemu_plugin_id_t id, void *data)
{
    (void)id;
    (void)data;
    FILE *f = fopen(out_path, "w");
    if (f) {
        fprintf(f, "count_insns: %llu\n", (unsigned long long)qemu_plugin_u64_sum(count));
        fprintf(f, "count_mov_cr3: %llu\n", (unsigned long long)qemu_plugin_u64_sum(mov_cr3));
        fprintf(f, "count_syscall: %llu\n", (unsigned long long)qemu_plugin_u64_sum(syscalls));
        fclose(f);
    }
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const void *info,
                                                               int argc, char **argv)
{
    (void)info;
    for (int k = 0; k < argc; k++) {
        if (strncmp(argv[k], "out=", 4) == 0) {
            out_path = argv[k] + 4;
        }
    }
    if (!out_path) {
        fprintf(stderr, "count_insns: no out=PATH argument\n");
        return 1;
    }
    count.score = qemu_plugin_scoreboard_new(sizeof(uint64_t));
    count.offset = 0;
    mov_cr3.score = qemu_plugin_scoreboard_new(sizeof(uint64_t));
    mov_cr3.offset = 0;
    syscalls.score = qemu_plugin_scoreboard_new(sizeof(uint64_t));
    syscalls.offset = 0;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit, NULL);
    return 0;
}
