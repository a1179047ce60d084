/* Instruction counter for armload's emulated CPU: one UC_HOOK_BLOCK callback, in C.
 *
 * Counts the instructions of every translation block at its entry (ARM: size/4; Thumb: by the
 * halfword-length rule, cached per block), advances jiffies_64 in emulated memory as the count
 * crosses tick boundaries (so code polling jiffies sees time move), and stops emulation before
 * a block that would take the count past stop_at (the instruction budget). armload/emu/clock.py has the same logic
 * in Python for machines without a C compiler; both must count identically.
 */
#include <stdint.h>
#include <string.h>

typedef void uc_engine;
typedef int (*mem_rw_fn)(uc_engine *, uint64_t, void *, size_t);
typedef int (*reg_read_fn)(uc_engine *, int, void *);
typedef int (*emu_stop_fn)(uc_engine *);

#define CACHE 65536
#define UC_ARM_REG_CPSR 3

typedef struct {
    uint64_t insns;
    uint64_t stop_at;
    uint64_t next_tick;
    uint64_t insns_per_tick;
    uint64_t jiffies;
    uint64_t jiffies_addr;
    uint32_t stopped;
    uint32_t blocks_lo;
    mem_rw_fn mem_read;
    mem_rw_fn mem_write;
    reg_read_fn reg_read;
    emu_stop_fn emu_stop;
    uint64_t keys[CACHE];
    uint32_t sizes[CACHE];
    uint32_t counts[CACHE];
} counter_t;

uint32_t armload_counter_size(void) { return (uint32_t)sizeof(counter_t); }

void armload_counter_clear_cache(counter_t *c) {
    memset(c->keys, 0xff, sizeof c->keys);
}

static uint32_t thumb_count(const uint16_t *h, uint32_t nhalf) {
    uint32_t n = 0, i = 0;
    while (i < nhalf) {
        uint32_t top = h[i] >> 11;
        i += (top == 0x1d || top == 0x1e || top == 0x1f) ? 2 : 1;
        n++;
    }
    return n;
}

static uint32_t block_count(uc_engine *uc, counter_t *c, uint64_t addr, uint32_t size) {
    uint32_t slot = (uint32_t)((addr >> 1) ^ (addr >> 17)) & (CACHE - 1);
    if (c->keys[slot] == addr && c->sizes[slot] == size)
        return c->counts[slot];
    uint32_t cpsr = 0, n;
    c->reg_read(uc, UC_ARM_REG_CPSR, &cpsr);
    if (!(cpsr & 0x20)) {
        n = size / 4;
    } else {
        uint16_t buf[2048];
        uint32_t len = size > sizeof buf ? sizeof buf : size;
        if (c->mem_read(uc, addr, buf, len) != 0)
            n = size / 2;
        else
            n = thumb_count(buf, len / 2);
    }
    c->keys[slot] = addr;
    c->sizes[slot] = size;
    c->counts[slot] = n;
    return n;
}

void armload_block_hook(uc_engine *uc, uint64_t addr, uint32_t size, void *user) {
    counter_t *c = (counter_t *)user;
    uint32_t n = block_count(uc, c, addr, size);
    /* The hook runs before its block: a block that would take the count past the budget does
     * not run (emu_stop here stops before it), so a budget of N never retires more than N. */
    if (c->insns + n > c->stop_at && !c->stopped) {
        c->stopped = 1;
        c->emu_stop(uc);
        return;
    }
    c->insns += n;
    c->blocks_lo++;
    if (c->jiffies_addr && c->insns >= c->next_tick) {
        uint64_t ticks = 1 + (c->insns - c->next_tick) / c->insns_per_tick;
        c->jiffies += ticks;
        c->next_tick += ticks * c->insns_per_tick;
        c->mem_write(uc, c->jiffies_addr, &c->jiffies, 8);
    }
}
