/* The generic timer's read accesses (MRC/MRRC p15 c14: CNTPCT, CNTVCT, CNTFRQ, CNTKCTL, CNTx_CTL,
 * CNTx_TVAL, CNTx_CVAL, CNTVOFF) as one native UC_HOOK_CODE callback per site (armload/emu/hw/c14.py):
 * the same result as timer.emulate() in Python, without a Python call per read (a udelay loop
 * reads CNTVCT millions of times). Writes stay in Python (they change the interrupt output).
 * The timer state (ctl, cval, kctl) and the idle time are mirrored here by the machine after
 * every change; simulated now = the block hook's instruction count + idle ns. */
#include <stdint.h>
#include <string.h>
#include "../arm_cond.h"

typedef void uc_engine;
typedef int (*reg_read_fn)(uc_engine *, int, void *);
typedef int (*reg_write_fn)(uc_engine *, int, const void *);

#define MAXSITES 256
#define PAGE_OFFSET 0xC0000000u
#define UC_ARM_REG_CPSR 3
#define UC_ARM_REG_PC 11
#define NS_PER_COUNT 16u
#define FREQ 62500000u

enum { CNTFRQ, CNTKCTL, CNTP_TVAL, CNTP_CTL, CNTV_TVAL, CNTV_CTL, CNTPCT, CNTVCT, CNTP_CVAL, CNTV_CVAL, CNTVOFF };

typedef struct {
    uint32_t addr, word;
    uint8_t reg, rt, rt2, cond;        /* rt2 = 0xFF: a 32-bit access */
} site_t;

typedef struct {
    uint64_t *insns;                   /* the block hook's instruction count (tick.Tick.insns) */
    uint64_t idle_ns;
    uint64_t cval[2];                  /* [0] physical, [1] virtual */
    uint32_t ctl[2];
    uint32_t kctl;
    uint32_t nsites;
    uint64_t hits;                     /* reads emulated here */
    uint8_t *ram;                      /* host address of guest RAM (the linear map's start) */
    uint64_t ram_size;
    reg_read_fn reg_read;
    reg_write_fn reg_write;
    site_t sites[MAXSITES];            /* sorted by address */
} c14_t;

uint32_t armload_c14_size(void) { return (uint32_t)sizeof(c14_t); }

static const int R[16] = {66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 12, 10, 11};

static void wr(uc_engine *uc, c14_t *t, int rt, uint32_t v) { t->reg_write(uc, R[rt], &v); }

void armload_c14_hook(uc_engine *uc, uint64_t addr, uint32_t size, void *user) {
    c14_t *t = (c14_t *)user;
    uint32_t lo = 0, hi = t->nsites, a = (uint32_t)addr, word, cpsr = 0, pc;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (t->sites[mid].addr < a) lo = mid + 1; else hi = mid;
    }
    if (lo >= t->nsites || t->sites[lo].addr != a)
        return;
    site_t *s = &t->sites[lo];
    uint64_t off = (uint64_t)a - PAGE_OFFSET;
    if (a < PAGE_OFFSET || off + 4 > t->ram_size)
        return;
    memcpy(&word, t->ram + off, 4);
    if (word != s->word)
        return;                        /* init text reused: not the access any more */
    pc = a + 4;
    if (s->cond != 0xE) {
        t->reg_read(uc, UC_ARM_REG_CPSR, &cpsr);
        if (!arm_cond_passed(s->cond, cpsr)) {
            t->reg_write(uc, UC_ARM_REG_PC, &pc);
            return;
        }
    }
    uint64_t cnt = (*t->insns + t->idle_ns) / NS_PER_COUNT;
    int tm = (s->reg == CNTV_TVAL || s->reg == CNTV_CTL || s->reg == CNTV_CVAL || s->reg == CNTVCT) ? 1 : 0;
    uint64_t v64 = 0;
    uint32_t v = 0;
    switch (s->reg) {
    case CNTFRQ: v = FREQ; break;
    case CNTKCTL: v = t->kctl; break;
    case CNTP_CTL: case CNTV_CTL:
        v = (t->ctl[tm] & 3) | ((t->ctl[tm] & 1) && cnt >= t->cval[tm] ? 4 : 0); break;
    case CNTP_TVAL: case CNTV_TVAL: v = (uint32_t)(t->cval[tm] - cnt); break;
    case CNTPCT: case CNTVCT: v64 = cnt; break;
    case CNTP_CVAL: v64 = t->cval[0]; break;
    case CNTV_CVAL: v64 = t->cval[1]; break;
    default: v64 = 0; break;
    }
    if (s->rt2 != 0xFF) {
        wr(uc, t, s->rt, (uint32_t)v64);
        wr(uc, t, s->rt2, (uint32_t)(v64 >> 32));
    } else
        wr(uc, t, s->rt, v);
    t->hits++;
    t->reg_write(uc, UC_ARM_REG_PC, &pc);
}
