/* The booted machine's one block hook (armload/emu/hw/tick.py): counts instructions (ARM
 * kernel code: size/4; Thumb blocks by the halfword-length rule, cached), stops emulation
 * before the first block that starts at or after `deadline` (the next timer event: it fires at
 * that block boundary), before a block that would pass `budget` (so a budget of N never retires
 * more than N), and while
 * `irq_line` is raised stops before the first block that starts with CPSR.I clear, so the
 * interrupt is taken at the instruction after the unmask (cpsie i / msr cpsr / an exception
 * return), never later. reason: 1 = deadline, 2 = IRQ deliverable, 3 = budget. Then the dispatch
 * table's C hooks of the block's first address run (a bitmap first: one test for most blocks). */
#include <stdint.h>
#include <string.h>

typedef void uc_engine;
typedef int (*mem_rw_fn)(uc_engine *, uint64_t, void *, size_t);
typedef int (*reg_read_fn)(uc_engine *, int, void *);
typedef int (*emu_stop_fn)(uc_engine *);

#define CACHE 16384
#define UC_ARM_REG_CPSR 3

/* A C hook run at the start of every block that starts at `addr`, with a code hook's arguments:
 * an entry point reached by a call or a branch always starts a block (the dispatch table's
 * owner only puts there addresses that no instruction falls through into). */
typedef void (*block_fn)(uc_engine *, uint64_t, uint32_t, void *);
typedef struct {
    uint32_t addr, pad;
    block_fn fn;
    void *user;
} disp_t;

#define DISP_BITS 65536

typedef struct {
    uint64_t insns;
    uint64_t deadline;
    uint64_t budget;
    uint32_t irq_line;
    uint32_t reason;
    mem_rw_fn mem_read;
    reg_read_fn reg_read;
    emu_stop_fn emu_stop;
    uint64_t keys[CACHE];
    uint32_t counts[CACHE];
    const disp_t *disp;              /* sorted by addr */
    uint32_t ndisp, pad;
    uint64_t bits[DISP_BITS / 64];   /* (addr >> 2) % DISP_BITS of every dispatched address */
} tick_t;

uint32_t armload_tick_size(void) { return (uint32_t)sizeof(tick_t); }

static uint32_t count(uc_engine *uc, tick_t *t, uint64_t addr, uint32_t size, uint32_t cpsr) {
    if (!(cpsr & 0x20))
        return size / 4;
    uint64_t key = addr << 16 | size;
    uint32_t slot = (uint32_t)((addr >> 1) ^ (addr >> 15)) & (CACHE - 1);
    if (t->keys[slot] == key)
        return t->counts[slot];
    uint16_t buf[2048];
    uint32_t len = size > sizeof buf ? sizeof buf : size, n = 0, i = 0;
    if (t->mem_read(uc, addr, buf, len) != 0)
        n = size / 2;
    else
        while (i < len / 2) {
            uint32_t top = buf[i] >> 11;
            i += (top == 0x1d || top == 0x1e || top == 0x1f) ? 2 : 1;
            n++;
        }
    t->keys[slot] = key;
    t->counts[slot] = n;
    return n;
}

void armload_tick_hook(uc_engine *uc, uint64_t addr, uint32_t size, void *user) {
    tick_t *t = (tick_t *)user;
    uint32_t cpsr = 0;
    if (t->reason)
        return;                        /* already stopping: the rest of this slice is void */
    t->reg_read(uc, UC_ARM_REG_CPSR, &cpsr);
    if (t->irq_line && !(cpsr & 0x80)) {
        t->reason = 2;
        t->emu_stop(uc);
        return;
    }
    if (t->insns >= t->deadline) {
        t->reason = 1;
        t->emu_stop(uc);
        return;
    }
    uint32_t n = count(uc, t, addr, size, cpsr);
    if (t->insns + n > t->budget) {
        t->reason = 3;
        t->emu_stop(uc);
        return;
    }
    t->insns += n;
    /* the table as it is now: a hook may install another one, which serves from the next block */
    const disp_t *d = t->disp;
    uint32_t k = (uint32_t)(addr >> 2) & (DISP_BITS - 1), lo = 0, nd = t->ndisp, hi = nd;
    if (!nd || !(t->bits[k >> 6] >> (k & 63) & 1))
        return;
    while (lo < hi) {                                   /* first row >= addr */
        uint32_t mid = (lo + hi) / 2;
        if (d[mid].addr < addr) lo = mid + 1; else hi = mid;
    }
    for (; lo < nd && d[lo].addr == addr; lo++)
        d[lo].fn(uc, addr, 4, d[lo].user);
}
